"""Looking inside a ViT: the paper's Figure 6 (Attention Rollout) and Figure 7 (embedding filters,
position-embedding similarity, mean attention distance), as functions and as one report."""

from .distance import attention_distance, patch_distances
from .filters import EmbeddingFilters, embedding_filters, filters_as_images
from .flow import MAX_FLOW_TOKENS, attention_flow
from .plots import plot_attention_distance, plot_attention_maps, plot_filters, plot_position_similarity
from .posemb import position_embedding_table, position_similarity
from .registers import register_attention_share
from .relevance import RelevanceMaps, class_relevance, relevance_rule
from .report import ReportFigure, write_report
from .rollout import (
    AttentionMaps,
    attention_maps,
    attention_rollout,
    layer_attention,
    masked_image,
    output_token_map,
    upsample_map,
)
from .run import ANALYSES, AnalysisResult, analyze, display_images, parse_what

__all__ = [
    "ANALYSES",
    "MAX_FLOW_TOKENS",
    "AnalysisResult",
    "AttentionMaps",
    "EmbeddingFilters",
    "RelevanceMaps",
    "ReportFigure",
    "analyze",
    "attention_distance",
    "attention_flow",
    "attention_maps",
    "attention_rollout",
    "class_relevance",
    "display_images",
    "embedding_filters",
    "filters_as_images",
    "layer_attention",
    "masked_image",
    "output_token_map",
    "parse_what",
    "patch_distances",
    "plot_attention_distance",
    "plot_attention_maps",
    "plot_filters",
    "plot_position_similarity",
    "position_embedding_table",
    "position_similarity",
    "register_attention_share",
    "relevance_rule",
    "upsample_map",
    "write_report",
]
