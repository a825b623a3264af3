"""The figures of a few images: Attention Rollout and raw attention (Fig. 6), the mean attention
distance over all of them (Fig. 7 right), and the hand-over to attention flow and relevance."""

from __future__ import annotations

from pathlib import Path

import torch

from vitlab.model import VisionTransformer
from vitlab.progress import progress

from .display import captions, display_images
from .distance import attention_distance, patch_distances
from .explain import explanation_figures
from .plots import plot_attention_distance, plot_attention_maps
from .report import ReportFigure
from .result import AnalysisResult, rounded
from .rollout import attention_maps, resolve_layer_head, upsample_map


def add_attention_figures(
    model: VisionTransformer,
    images: torch.Tensor,
    out: Path,
    chosen: tuple[str, ...],
    layer: int,
    head: int | None,
    show: int,
    batch_size: int,
    result: AnalysisResult,
) -> None:
    if len(images) == 0:
        raise ValueError("attention analyses need at least one image, got none")
    count = min(show, len(images))
    distances, logits, rollout, raw = attention_of(model, images, chosen, layer, head, count, batch_size)
    if "rollout" in chosen:
        add_map_figures(model, images[:count], logits[:count], rollout[:count], raw[:count], out, layer, head, result)
    if "distance" in chosen:
        add_distance_figure(model, images, distances, out, result)


def attention_of(
    model: VisionTransformer,
    images: torch.Tensor,
    chosen: tuple[str, ...],
    layer: int,
    head: int | None,
    count: int,
    batch_size: int,
) -> tuple[torch.Tensor, ...]:
    """The mean attention distance of each image, and the logits, rollout and raw attention of the
    first `count` at least; batch by batch, keeping only what is drawn."""
    config = model.config
    device = next(model.parameters()).device
    grid = config.grid_for(images.shape)
    patch = config.effective_patch_size  # pixels between neighbouring tokens
    parts: tuple[list[torch.Tensor], ...] = ([], [], [], [])
    starts = range(0, len(images), batch_size)
    for start in progress(starts, "attention", total=len(starts)):
        maps = attention_maps(model, images[start : start + batch_size].to(device), layer, head)
        distance = attention_distance(maps.attentions, grid, patch, config.num_prefix_tokens)
        for part, value in zip(parts, (distance, maps.logits, maps.rollout, maps.raw), strict=True):
            part.append(value.cpu())
        del maps  # the attention of every layer is large: keep only what is drawn
        if "distance" not in chosen and start + batch_size >= count:
            break  # the maps alone need only the images that are drawn
    return tuple(torch.cat(part) for part in parts)


def add_map_figures(
    model: VisionTransformer,
    images: torch.Tensor,
    logits: torch.Tensor,
    rollout: torch.Tensor,
    raw: torch.Tensor,
    out: Path,
    layer: int,
    head: int | None,
    result: AnalysisResult,
) -> None:
    """Attention Rollout and the raw attention of one layer (and head) over the images shown (Fig. 6)."""
    config = model.config
    grid = config.grid_for(images.shape)
    chosen_layer, chosen_head = resolve_layer_head(config.depth, config.num_heads, layer, head)
    pictures = display_images(images, config.preprocessing.mean, config.preprocessing.std)
    size = (pictures.shape[1], pictures.shape[2])
    labels = captions(logits, config)
    head_name = "mean over heads" if chosen_head is None else f"head {chosen_head + 1}"
    layer_name = f"layer {chosen_layer + 1} of {config.depth}, {head_name}"
    result.figures.append(
        ReportFigure(
            "Attention Rollout (Fig. 6)",
            plot_attention_maps(
                pictures.numpy(),
                upsample_map(rollout, size).numpy(),
                out / "rollout.png",
                "Attention Rollout to the output token",
                labels,
            ),
            "Attention averaged over heads, identity added for the residual, rows renormalised, "
            "multiplied through all layers; the row of the token the classifier reads, upsampled.",
        )
    )
    result.figures.append(
        ReportFigure(
            f"Raw attention, {layer_name}",
            plot_attention_maps(
                pictures.numpy(),
                upsample_map(raw, size).numpy(),
                out / "raw_attention.png",
                f"Raw attention of the output token, {layer_name}",
                labels,
            ),
            "The attention weights of one layer (and head) from the token the classifier reads.",
        )
    )
    result.numbers["rollout"] = {"grid": list(grid), "maps": rounded(rollout)}
    result.numbers["raw_attention"] = {
        "layer_index": chosen_layer,
        "head_index": chosen_head,
        "grid": list(grid),
        "maps": rounded(raw),
    }
    result.numbers["predictions"] = labels


def add_distance_figure(
    model: VisionTransformer, images: torch.Tensor, per_image: torch.Tensor, out: Path, result: AnalysisResult
) -> None:
    """The mean attention distance of each layer's heads over every image (Fig. 7 right)."""
    grid = model.config.grid_for(images.shape)
    mean = per_image.mean(dim=0)  # per_image: (images, layers, heads)
    uniform = float(patch_distances(grid, model.config.effective_patch_size).mean())
    image_size = (images.shape[-2], images.shape[-1])
    result.figures.append(
        ReportFigure(
            "Mean attention distance (Fig. 7 right)",
            plot_attention_distance(mean.numpy(), out / "attention_distance.png", image_size, uniform),
            f"Distance between query and attended patches weighted by attention, averaged over "
            f"{len(per_image)} images; one dot per head. Dashed: a head attending uniformly.",
        )
    )
    result.numbers["mean_attention_distance"] = {
        "pixels": rounded(mean, 3),
        "std_over_images": rounded(per_image.std(dim=0, unbiased=False), 3),
        "uniform_attention_pixels": round(uniform, 3),
        "images": len(per_image),
    }


def add_explanations(
    model: VisionTransformer,
    images: torch.Tensor,
    out: Path,
    chosen: tuple[str, ...],
    result: AnalysisResult,
) -> None:
    config = model.config
    pictures = display_images(images, config.preprocessing.mean, config.preprocessing.std)
    device = next(model.parameters()).device
    figures, numbers = explanation_figures(
        model, images.to(device), pictures, out, chosen, lambda logits: captions(logits, config)
    )
    result.figures.extend(figures)
    result.numbers.update({key: {**entry, "maps": rounded(entry["maps"])} for key, entry in numbers.items()})
