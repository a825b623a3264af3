"""All the analyses of one model on a set of images: figures, their numbers as JSON, an HTML page.

    model.eval()
    result = analyze(model, images, "analysis/")   # images: (B, C, H, W), normalised for the model

The attention maps and the mean attention distance come from `forward_with_attention`, the same
pass that yields the predictions printed under each image. Each analysis adds its figures and numbers
to one AnalysisResult: the few images in image_figures, a dataset in dataset_figures, the weights
alone in weight_figures.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from vitlab.model import BiTConfig, BiTResNet, VisionTransformer, ViTConfig

from .dataset import dataset_attention
from .dataset_figures import add_dataset_figures
from .display import display_images
from .explain import EXPLANATIONS
from .image_figures import add_attention_figures, add_explanations
from .registers import add_register_numbers
from .report import write_report
from .result import AnalysisResult
from .rollout import require_attention
from .weight_figures import add_filter_figure, add_position_figure

__all__ = ["ANALYSES", "AnalysisResult", "analyze", "display_images", "parse_what"]

Batches = Iterable[tuple[torch.Tensor, torch.Tensor]]

ANALYSES = ("rollout", "distance", "posemb", "filters")  # "all": the paper's Fig. 6 and 7
NEED_ATTENTION = ("rollout", "distance", "posemb", *EXPLANATIONS)  # a ResNet has no attention and no E_pos


def parse_what(what: str | Iterable[str]) -> tuple[str, ...]:
    """ "all", "rollout,distance" or a list -> the analyses to run, in the order of ANALYSES.

    "all" is ANALYSES; the EXPLANATIONS (flow, relevance) run only when named, as in "all,flow".
    """
    names = [w.strip() for w in (what.split(",") if isinstance(what, str) else what) if w.strip()]
    known = (*ANALYSES, *EXPLANATIONS)
    unknown = sorted(set(names) - set(known) - {"all"})
    if unknown or not names:
        raise ValueError(f"unknown analysis {', '.join(unknown) or '(none)'}; choose all or some of {', '.join(known)}")
    if "all" in names:
        names = [*ANALYSES, *names]
    return tuple(a for a in known if a in names)


BATCH = 16  # images per forward pass of the per-image analyses (each keeps every layer's attention)


@torch.no_grad()
def analyze(
    model: VisionTransformer | BiTResNet,
    images: torch.Tensor,
    out_dir: str | Path,
    what: str | Iterable[str] = "all",
    layer: int = -1,
    head: int | None = None,
    show: int = 6,
    batch_size: int = BATCH,
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
            result.notes.append(
                f"{', '.join(transformer_only)} skipped: a ResNet has no attention and no position embedding"
            )
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
        add_dataset_figures(vit, dataset_attention(vit, dataset, class_names), out, chosen, result)
        per_image = tuple(name for name in chosen if name != "distance")  # over the dataset instead
    if "rollout" in per_image or "distance" in per_image:
        vit = require_attention(model)
        add_attention_figures(vit, images, out, per_image, layer, head, show, batch_size, result)
    if isinstance(config, ViTConfig) and config.register_tokens and ("rollout" in chosen or "distance" in chosen):
        add_register_numbers(require_attention(model), images[:batch_size], result)
    if any(name in chosen for name in EXPLANATIONS):
        add_explanations(require_attention(model), images[: min(show, len(images))], out, chosen, result)
    if "posemb" in chosen:
        add_position_figure(require_attention(model), out, explicit=named, result=result)
    if "filters" in chosen:
        add_filter_figure(model, out, result)
    result.json_path = out / "analysis.json"
    result.json_path.write_text(json.dumps(result.numbers, indent=1))
    title = f"vitlab analysis of {config.name or type(model).__name__} ({_model_words(config)})"
    result.html_path = write_report(
        out / "report.html", title, result.figures, result.numbers, result.notes, result.tables
    )
    return result


def _model_numbers(config: ViTConfig | BiTConfig) -> dict[str, Any]:
    if isinstance(config, BiTConfig):
        return {
            "name": config.name,
            "family": "bit",
            "layers": list(config.resnet.layers),
            "width": config.resnet.width,
        }
    backbone = config.backbone
    return {
        "name": config.name,
        "family": "hybrid" if backbone is not None else "vit",
        "pool": config.pool,
        "pos_embed": config.pos_embed,
        "patch_size": config.patch_size,
        "effective_patch_size": config.effective_patch_size,
        "depth": config.depth,
        "num_heads": config.num_heads,
    }


def _model_words(config: ViTConfig | BiTConfig) -> str:
    if isinstance(config, BiTConfig):
        return f"ResNet, {config.resnet.depth} layers"
    if config.backbone is not None:
        return (
            f"hybrid: ResNet stride {config.backbone.stride} x P={config.patch_size}, "
            f"{config.effective_patch_size} px per token, {config.depth} layers"
        )
    return f"P={config.patch_size}, {config.depth} layers"
