"""The figures read from the weights alone, no image needed: position-embedding similarity
(Fig. 7 centre) and the principal components of the filters that meet the pixels (Fig. 7 left)."""

from __future__ import annotations

from pathlib import Path

from vitlab.model import BiTResNet, VisionTransformer

from .filters import embedding_filters, filters_as_images, pixel_filters
from .plots import plot_filters, plot_position_similarity
from .posemb import position_embedding_table, position_similarity
from .report import ReportFigure
from .result import AnalysisResult, rounded


def add_position_figure(model: VisionTransformer, out: Path, explicit: bool, result: AnalysisResult) -> None:
    """explicit: posemb was asked for by name, so a model without a position table is refused, not noted."""
    try:
        table, grid = position_embedding_table(model)
    except ValueError as error:
        if explicit:
            raise
        result.notes.append(f"Position-embedding similarity skipped: {error}")
        return
    similarity = position_similarity(table, grid)
    result.figures.append(
        ReportFigure(
            "Position embedding similarity (Fig. 7 centre)",
            plot_position_similarity(similarity.numpy(), out / "posemb_similarity.png"),
            "Tile (row, column) shows the cosine similarity of that patch's position embedding with all others.",
        )
    )
    result.numbers["position_similarity"] = {
        "grid": list(grid),
        "matrix": rounded(similarity.reshape(table.shape[0], -1), 4),
    }


def add_filter_figure(model: VisionTransformer | BiTResNet, out: Path, result: AnalysisResult) -> None:
    source = pixel_filters(model)
    weight = source.weight.detach()
    filters = embedding_filters(weight)
    ratio = filters.explained_variance_ratio
    size = "x".join(str(side) for side in weight.shape[-2:])
    if source.kind == "patch embedding":
        title = "Embedding filters (Fig. 7 left)"
    else:
        title = "Root convolution filters (in place of Fig. 7 left)"
        result.notes.append(f"Filters: {source.source} is shown; Fig. 7 left is the patch embedding of a plain ViT.")
    result.figures.append(
        ReportFigure(
            title,
            plot_filters(filters_as_images(filters.components), out / "embedding_filters.png", ratio),
            f"The first {len(ratio)} principal components of the {weight.shape[0]} {size} filters of {source.source}, "
            f"each stretched to its own range.",
        )
    )
    result.numbers["embedding_filters"] = {
        "layer": source.kind,
        "explained_variance_ratio": rounded(ratio),
        "components": rounded(filters.components.reshape(len(ratio), -1)),
    }
