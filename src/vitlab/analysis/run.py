"""All the analyses of one model on a set of images: figures, their numbers as JSON, an HTML page.

    model.eval()
    result = analyze(model, images, "analysis/")   # images: (B, C, H, W), normalised for the model

The attention maps and the mean attention distance come from `forward_with_attention`, the same
pass that yields the predictions printed under each image.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from vitlab.model import BiTConfig, BiTResNet, ViTConfig, VisionTransformer
from vitlab.progress import progress

from .dataset import DatasetAttention, dataset_attention
from .dataset_plots import plot_class_distance, plot_class_maps, plot_head_grid
from .distance import attention_distance, patch_distances
from .explain import EXPLANATIONS, explanation_figures
from .filters import embedding_filters, filters_as_images, pixel_filters
from .plots import plot_attention_distance, plot_attention_maps, plot_filters, plot_position_similarity
from .posemb import position_embedding_table, position_similarity
from .report import ReportFigure, ReportTable, write_report
from .rollout import attention_maps, require_attention, resolve_layer_head, upsample_map

Batches = Iterable[tuple[torch.Tensor, torch.Tensor]]

ANALYSES = ("rollout", "distance", "posemb", "filters")  # "all": the paper's Fig. 6 and 7
NEED_ATTENTION = ("rollout", "distance", "posemb", *EXPLANATIONS)  # a ResNet has no attention and no E_pos
DISPLAY_SIZE = 224  # small inputs are enlarged to this many pixels on the short side for the figures


@dataclass
class AnalysisResult:
    figures: list[ReportFigure] = field(default_factory=list)
    tables: list[ReportTable] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    json_path: Path | None = None
    html_path: Path | None = None


def parse_what(what: str | Iterable[str]) -> tuple[str, ...]:
    """"all", "rollout,distance" or a list -> the analyses to run, in the order of ANALYSES.

    "all" is ANALYSES; the EXPLANATIONS (flow, relevance) run only when named, as in "all,flow".
    """
    names = [w.strip() for w in (what.split(",") if isinstance(what, str) else what) if w.strip()]
    known = (*ANALYSES, *EXPLANATIONS)
    unknown = sorted(set(names) - set(known) - {"all"})
    if unknown or not names:
        raise ValueError(
            f"unknown analysis {', '.join(unknown) or '(none)'}; choose all or some of {', '.join(known)}"
        )
    if "all" in names:
        names = [*ANALYSES, *names]
    return tuple(a for a in known if a in names)


def display_images(images: torch.Tensor, mean: Iterable[float], std: Iterable[float]) -> torch.Tensor:
    """Undo the input normalisation: (B, C, H, W) -> (B, H, W, 3) in [0, 1], enlarged for display."""
    mean_t = torch.tensor(list(mean), dtype=torch.float32).view(1, -1, 1, 1)
    std_t = torch.tensor(list(std), dtype=torch.float32).view(1, -1, 1, 1)
    pixels = images.detach().float().cpu() * std_t + mean_t
    if pixels.shape[1] != 3:
        pixels = pixels.mean(dim=1, keepdim=True).expand(-1, 3, -1, -1)
    scale = max(1, math.ceil(DISPLAY_SIZE / min(pixels.shape[-2:])))
    if scale > 1:
        pixels = F.interpolate(pixels, scale_factor=scale, mode="bilinear", align_corners=False)
    return pixels.clamp(0.0, 1.0).permute(0, 2, 3, 1)


def _captions(logits: torch.Tensor, config) -> list[str] | None:
    """"pred 7 (93%)" per image; none for a model without a classifier (its logits are features)."""
    if config.num_classes < 2:
        return None
    probs = logits.float().softmax(dim=-1)
    top = probs.max(dim=-1)
    names = config.class_names or [str(k) for k in range(config.num_classes)]
    return [f"pred {names[int(k)]} ({float(p):.0%})" for p, k in zip(top.values, top.indices)]


def _rounded(values: torch.Tensor | np.ndarray, digits: int = 5) -> list:
    return np.round(np.asarray(values, dtype=np.float64), digits).tolist()


@torch.no_grad()
def analyze(
    model: VisionTransformer | BiTResNet,
    images: torch.Tensor,
    out_dir: str | Path,
    what: str | Iterable[str] = "all",
    layer: int = -1,
    head: int | None = None,
    show: int = 6,
    batch_size: int = 16,
    dataset: Batches | None = None,
    class_names: Sequence[str] | None = None,
) -> AnalysisResult:
    """Run the chosen analyses, write their PNGs, analysis.json and report.html into `out_dir`.

    images: (B, C, H, W), normalised as the model expects. Every image counts towards the mean
    attention distance (the paper averages 128); the first `show` are drawn with their maps.
    dataset: (images, labels) batches, e.g. a DataLoader, read once batch by batch: the mean attention
    distance is then over all of them and, with rollout, averaged per class of `class_names`.
    """
    chosen = parse_what(what)
    named = not set(ANALYSES) <= set(chosen)  # a subset named: what cannot run is refused, not skipped
    result = AnalysisResult()
    if not isinstance(model, VisionTransformer):  # a BiT ResNet: only its root filters apply
        transformer_only = [name for name in chosen if name in NEED_ATTENTION]
        if (named or set(chosen) & set(EXPLANATIONS)) and transformer_only:
            require_attention(model)  # asked for by name: refused in one line
        if transformer_only:
            result.notes.append(f"{', '.join(transformer_only)} skipped: a ResNet has no attention "
                                f"and no position embedding")
        chosen = tuple(name for name in chosen if name not in NEED_ATTENTION)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = model.config
    result.numbers["model"] = _model_numbers(config)
    per_image = chosen
    if dataset is not None and ("rollout" in chosen or "distance" in chosen):
        if class_names is None:
            raise ValueError("a dataset analysis needs the class names of its labels")
        vit = require_attention(model)
        _dataset_analyses(vit, dataset_attention(vit, dataset, class_names), out, chosen, result)
        per_image = tuple(name for name in chosen if name != "distance")  # over the dataset instead
    if "rollout" in per_image or "distance" in per_image:
        _attention_analyses(require_attention(model), images, out, per_image, layer, head, show, batch_size, result)
    if any(name in chosen for name in EXPLANATIONS):
        _explanations(require_attention(model), images[: min(show, len(images))], out, chosen, result)
    if "posemb" in chosen:
        _position_analysis(require_attention(model), out, explicit=named, result=result)
    if "filters" in chosen:
        _filter_analysis(model, out, result)
    result.json_path = out / "analysis.json"
    result.json_path.write_text(json.dumps(result.numbers, indent=1))
    title = f"vitlab analysis of {config.name or type(model).__name__} ({_model_words(config)})"
    result.html_path = write_report(out / "report.html", title, result.figures, result.numbers, result.notes,
                                    result.tables)
    return result


def _attention_analyses(
    model: VisionTransformer, images: torch.Tensor, out: Path, chosen: tuple[str, ...],
    layer: int, head: int | None, show: int, batch_size: int, result: AnalysisResult,
) -> None:
    if len(images) == 0:
        raise ValueError("attention analyses need at least one image, got none")
    config = model.config
    device = next(model.parameters()).device
    grid = config.grid_for(images.shape)
    patch = config.effective_patch_size  # pixels between neighbouring tokens
    count = min(show, len(images))
    distances: list[torch.Tensor] = []
    logit_parts: list[torch.Tensor] = []
    rollout_parts: list[torch.Tensor] = []
    raw_parts: list[torch.Tensor] = []
    starts = range(0, len(images), batch_size)
    for start in progress(starts, "attention", total=len(starts)):
        maps = attention_maps(model, images[start : start + batch_size].to(device), layer, head)
        distances.append(attention_distance(maps.attentions, grid, patch, config.num_prefix_tokens).cpu())
        logit_parts.append(maps.logits.cpu())
        rollout_parts.append(maps.rollout.cpu())
        raw_parts.append(maps.raw.cpu())
        del maps  # the attention of every layer is large: keep only what is drawn
        if "distance" not in chosen and start + batch_size >= count:
            break  # the maps alone need only the images that are drawn
    chosen_layer, chosen_head = resolve_layer_head(config.depth, config.num_heads, layer, head)
    if "rollout" in chosen:
        logits = torch.cat(logit_parts)[:count]
        rollout = torch.cat(rollout_parts)[:count]
        raw = torch.cat(raw_parts)[:count]
        pictures = display_images(images[:count], config.preprocessing.mean, config.preprocessing.std)
        size = (pictures.shape[1], pictures.shape[2])
        captions = _captions(logits, config)
        head_name = "mean over heads" if chosen_head is None else f"head {chosen_head + 1}"
        layer_name = f"layer {chosen_layer + 1} of {config.depth}, {head_name}"
        result.figures.append(ReportFigure(
            "Attention Rollout (Fig. 6)",
            plot_attention_maps(pictures.numpy(), upsample_map(rollout, size).numpy(), out / "rollout.png",
                                "Attention Rollout to the output token", captions),
            "Attention averaged over heads, identity added for the residual, rows renormalised, "
            "multiplied through all layers; the row of the token the classifier reads, upsampled.",
        ))
        result.figures.append(ReportFigure(
            f"Raw attention, {layer_name}",
            plot_attention_maps(pictures.numpy(), upsample_map(raw, size).numpy(), out / "raw_attention.png",
                                f"Raw attention of the output token, {layer_name}", captions),
            "The attention weights of one layer (and head) from the token the classifier reads.",
        ))
        result.numbers["rollout"] = {"grid": list(grid), "maps": _rounded(rollout)}
        result.numbers["raw_attention"] = {
            "layer_index": chosen_layer, "head_index": chosen_head, "grid": list(grid), "maps": _rounded(raw),
        }
        result.numbers["predictions"] = captions
    if "distance" in chosen:
        per_image = torch.cat(distances)  # (images, layers, heads)
        mean = per_image.mean(dim=0)
        uniform = float(patch_distances(grid, patch).mean())
        result.figures.append(ReportFigure(
            "Mean attention distance (Fig. 7 right)",
            plot_attention_distance(mean.numpy(), out / "attention_distance.png", (images.shape[-2], images.shape[-1]), uniform),
            f"Distance between query and attended patches weighted by attention, averaged over "
            f"{len(per_image)} images; one dot per head. Dashed: a head attending uniformly.",
        ))
        result.numbers["mean_attention_distance"] = {
            "pixels": _rounded(mean, 3),
            "std_over_images": _rounded(per_image.std(dim=0, unbiased=False), 3),
            "uniform_attention_pixels": round(uniform, 3),
            "images": len(per_image),
        }


def _dataset_analyses(
    model: VisionTransformer, data: DatasetAttention, out: Path, chosen: tuple[str, ...], result: AnalysisResult,
) -> None:
    config = model.config
    per_class = data.per_class()
    names = list(per_class)
    if "distance" in chosen:
        mean = data.mean_distance()
        uniform = float(patch_distances(data.grid, config.effective_patch_size).mean())
        assert data.first_image is not None
        image_size = (int(data.first_image.shape[-2]), int(data.first_image.shape[-1]))
        result.figures.append(ReportFigure(
            "Mean attention distance (Fig. 7 right)",
            plot_attention_distance(mean, out / "attention_distance.png", image_size, uniform),
            f"Distance between query and attended patches weighted by attention, averaged over the "
            f"{data.images} images of the dataset; one dot per head. Dashed: a head attending uniformly.",
        ))
        result.numbers["mean_attention_distance"] = {
            "pixels": _rounded(mean, 3), "uniform_attention_pixels": round(uniform, 3), "images": data.images,
        }
        table = np.stack([row.distance.mean(axis=1) for row in per_class.values()])
        result.figures.append(ReportFigure(
            "Mean attention distance per class",
            plot_class_distance(table, names, out / "attention_distance_per_class.png"),
            "Each class's images averaged apart; per layer, the mean over heads.",
        ))
    if "rollout" in chosen:
        maps = np.stack([row.rollout for row in per_class.values()])
        result.figures.append(ReportFigure(
            "Attention Rollout per class",
            plot_class_maps(maps, names, [row.images for row in per_class.values()],
                            out / "rollout_per_class.png"),
            "Attention Rollout to the output token, averaged over each class's images.",
        ))
        assert data.first_image is not None and data.head_maps is not None
        picture = display_images(data.first_image[None], config.preprocessing.mean, config.preprocessing.std)
        heads = data.head_maps
        size = (int(picture.shape[1]), int(picture.shape[2]))
        heat = upsample_map(heads.flatten(0, 1), size).reshape(*heads.shape[:2], *size)
        label = data.class_names[data.first_label] if data.first_label is not None else "?"
        result.figures.append(ReportFigure(
            "Every layer and head, one image",
            plot_head_grid(picture[0].numpy(), heat.numpy(), out / "heads.png",
                           f"Attention of the output token, first image (class {label})"),
            "Rows: layers; columns: heads. Each map is the attention of the token the classifier reads.",
        ))
        result.numbers["heads_first_image"] = {"class": label, "maps": _rounded(heads)}
    result.numbers["per_class"] = {
        name: {"images": row.images, "top1": round(row.top1, 5),
               **({"mean_attention_distance": _rounded(row.distance, 3)} if "distance" in chosen else {}),
               **({"rollout": _rounded(row.rollout)} if "rollout" in chosen else {})}
        for name, row in per_class.items()
    }
    columns = ["class", "images", "top-1"] + (["mean attention distance (px)"] if "distance" in chosen else [])
    rows = [[name, str(row.images), f"{row.top1:.4f}"]
            + ([f"{float(np.mean(row.distance)):.2f}"] if "distance" in chosen else [])
            for name, row in per_class.items()]
    result.tables.append(ReportTable(
        "Per class", columns, rows,
        f"{data.images} images; top-1 of this analysis pass; the distance is the mean over layers and heads.",
    ))


def _explanations(
    model: VisionTransformer, images: torch.Tensor, out: Path, chosen: tuple[str, ...], result: AnalysisResult,
) -> None:
    config = model.config
    pictures = display_images(images, config.preprocessing.mean, config.preprocessing.std)
    device = next(model.parameters()).device
    figures, numbers = explanation_figures(model, images.to(device), pictures, out, chosen,
                                           lambda logits: _captions(logits, config))
    result.figures.extend(figures)
    result.numbers.update({key: {**entry, "maps": _rounded(entry["maps"])} for key, entry in numbers.items()})


def _position_analysis(model: VisionTransformer, out: Path, explicit: bool, result: AnalysisResult) -> None:
    try:
        table, grid = position_embedding_table(model)
    except ValueError as error:
        if explicit:
            raise
        result.notes.append(f"Position-embedding similarity skipped: {error}")
        return
    similarity = position_similarity(table, grid)
    result.figures.append(ReportFigure(
        "Position embedding similarity (Fig. 7 centre)",
        plot_position_similarity(similarity.numpy(), out / "posemb_similarity.png"),
        "Tile (row, column) shows the cosine similarity of that patch's position embedding with all others.",
    ))
    result.numbers["position_similarity"] = {
        "grid": list(grid), "matrix": _rounded(similarity.reshape(table.shape[0], -1), 4),
    }


def _filter_analysis(model: VisionTransformer | BiTResNet, out: Path, result: AnalysisResult) -> None:
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
    result.figures.append(ReportFigure(
        title,
        plot_filters(filters_as_images(filters.components), out / "embedding_filters.png", ratio),
        f"The first {len(ratio)} principal components of the {weight.shape[0]} {size} filters of {source.source}, "
        f"each stretched to its own range.",
    ))
    result.numbers["embedding_filters"] = {
        "layer": source.kind,
        "explained_variance_ratio": _rounded(ratio),
        "components": _rounded(filters.components.reshape(len(ratio), -1)),
    }


def _model_numbers(config: ViTConfig | BiTConfig) -> dict[str, Any]:
    if isinstance(config, BiTConfig):
        return {"name": config.name, "family": "bit", "layers": list(config.resnet.layers), "width": config.resnet.width}
    backbone = config.backbone
    return {
        "name": config.name, "family": "hybrid" if backbone is not None else "vit", "pool": config.pool,
        "pos_embed": config.pos_embed, "patch_size": config.patch_size,
        "effective_patch_size": config.effective_patch_size, "depth": config.depth, "num_heads": config.num_heads,
    }


def _model_words(config: ViTConfig | BiTConfig) -> str:
    if isinstance(config, BiTConfig):
        return f"ResNet, {config.resnet.depth} layers"
    if config.backbone is not None:
        return (f"hybrid: ResNet stride {config.backbone.stride} x P={config.patch_size}, "
                f"{config.effective_patch_size} px per token, {config.depth} layers")
    return f"P={config.patch_size}, {config.depth} layers"
