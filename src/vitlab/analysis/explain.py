"""The figures of the two analyses `analyze` runs only when named: Attention Flow and class relevance.

Neither is one of the paper's figures, and flow's cost bounds the token count, so "all" leaves
them out; `--what rollout,flow,relevance` draws them beside rollout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .axial import token_attention
from .flow import MAX_FLOW_TOKENS, attention_flow
from .plots import plot_attention_maps
from .relevance import class_relevance
from .report import ReportFigure
from .rollout import output_token_map, require_attention, upsample_map

EXPLANATIONS = ("flow", "relevance")  # named in --what only


def flow_map(model: nn.Module, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and the (B, h, w) Attention Flow map of the token the classifier reads, one pass."""
    vit = require_attention(model)  # the caller checked already; this narrows the type
    config = vit.config
    with torch.no_grad():
        logits, weights = vit.forward_with_attention(images)
    attentions = token_attention(weights)  # an Axial-ViT: R_1, C_1, R_2, C_2, ... as (T, T) layers
    tokens = attentions[0].shape[-1]
    if tokens > MAX_FLOW_TOKENS:
        raise ValueError(
            f"flow: {tokens} tokens is above attention flow's limit of {MAX_FLOW_TOKENS} (a maximum flow per "
            f"token pair); choose a smaller --image-size, or call attention_flow(max_tokens=...)"
        )
    prefix = config.num_prefix_tokens
    rows = [0] if config.has_class_token else None  # the class token's row alone, or every row for GAP
    flow = attention_flow(attentions, rows=rows)
    return logits, output_token_map(flow, config.grid_for(images.shape), prefix, config.has_class_token)


def explanation_figures(
    model: nn.Module,
    images: torch.Tensor,
    pictures: torch.Tensor,
    out: Path,
    chosen: Sequence[str],
    captions: Callable[[torch.Tensor], list[str] | None],
) -> tuple[list[ReportFigure], dict[str, Any]]:
    """Figures and numbers of the chosen explanations for `images` (drawn as `pictures`); each
    entry of the numbers holds its (B, h, w) maps as a tensor, for the caller to round."""
    if len(images) == 0:
        raise ValueError("attention analyses need at least one image, got none")
    figures: list[ReportFigure] = []
    numbers: dict[str, Any] = {}
    size = (int(pictures.shape[1]), int(pictures.shape[2]))
    if "flow" in chosen:
        logits, maps = flow_map(model, images)
        figures.append(
            ReportFigure(
                "Attention Flow (Abnar & Zuidema 2020)",
                plot_attention_maps(
                    pictures.numpy(),
                    upsample_map(maps.cpu(), size).numpy(),
                    out / "attention_flow.png",
                    "Attention Flow to the output token",
                    captions(logits.cpu()),
                ),
                "Maximum flow from the classifier's token to each input patch through the graph of all "
                "layers' attention (averaged over heads, identity added, rows renormalised), upsampled.",
            )
        )
        numbers["attention_flow"] = {"grid": list(maps.shape[1:]), "maps": maps.cpu()}
    if "relevance" in chosen:
        relevance = class_relevance(model, images)
        figures.append(
            ReportFigure(
                "Class relevance (Chefer et al. 2021)",
                plot_attention_maps(
                    pictures.numpy(),
                    upsample_map(relevance.maps.cpu(), size).numpy(),
                    out / "class_relevance.png",
                    "Relevance for the predicted class",
                    captions(relevance.logits.cpu()),
                ),
                "Attention weighted by the gradient of the predicted class's logit, negative parts cut, "
                "averaged over heads and accumulated over the layers (R = R + A_bar R).",
            )
        )
        numbers["class_relevance"] = {
            "grid": list(relevance.maps.shape[1:]),
            "classes": relevance.target.tolist(),
            "maps": relevance.maps.cpu(),
        }
    return figures, numbers
