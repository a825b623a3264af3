"""The README.md model card `save_pretrained` writes beside config.json and model.safetensors.

It makes the folder a Hub model repository as people expect one: YAML metadata the Hub reads
(library, task, and a model-index with the validation accuracy when it is known), then the
architecture, the preprocessing, the classes, the training summary and its metrics, and how to
use the model. The training summary is `extra["training"]` as the trainer passes it (a flat dict:
`val_*` / `test_*` / `train_*` entries are metrics, the rest describe the run); a `metrics` dict
and a `license` string in `extra` are used too.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCardData

from vitlab.config_fields import crop_mode_for
from vitlab.model import BiTConfig, ViTConfig

CARD_FILE = "README.md"
METRIC_PREFIXES = ("val_", "test_", "train_")
MAX_CLASSES_SHOWN = 20
POOLING = {"token": "class token (Eq. 4)", "gap": "global average pooling", "flatten": "flattened tokens"}
POSITIONS = {
    "learned": "learned 1-D",
    "2d": "learned 2-D (X and Y)",
    "sincos": "fixed sine-cosine",
    "relative": "learned 1-D relative attention (Appendix D.4)",
    "relative_bias": "learned relative 2-D attention bias (not the paper's)",
    "none": "none",
}


def _value(value: Any) -> str:
    if value is None:  # e.g. val_top5 with 5 classes or fewer
        return "n/a"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _table(rows: list[tuple[str, Any]]) -> str:
    return "\n".join(["| | |", "|---|---|"] + [f"| {key} | {_value(value)} |" for key, value in rows])


def split_summary(extra: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(run description, metrics) from the trainer's summary and any explicit `metrics`."""
    training = dict(extra.get("training") or {})
    metrics = {key: training.pop(key) for key in list(training) if key.startswith(METRIC_PREFIXES)}
    metrics.update(extra.get("metrics") or {})
    return training, metrics


def _metadata(
    config: ViTConfig | BiTConfig, training: dict[str, Any], metrics: dict[str, Any], extra: dict[str, Any]
) -> str:
    name = config.name or "vitlab-vit"
    results = []
    # A masked-patch pre-training run's val_top1 is its patch target's accuracy, not a classification result.
    classified = training.get("objective", "classify") == "classify"
    if classified and isinstance(metrics.get("val_top1"), (int, float)) and training.get("data"):
        dataset = str(training["data"])
        results.append(
            EvalResult(
                task_type="image-classification",
                dataset_type=dataset,
                dataset_name=dataset,
                dataset_split="validation",
                metric_type="accuracy",
                metric_value=float(metrics["val_top1"]),
            )
        )
    data = ModelCardData(
        library_name="vitlab",
        pipeline_tag="image-classification",
        license=extra.get("license"),
        tags=["vitlab", "vision-transformer", "image-classification"],
        model_name=name if results else None,
        eval_results=results or None,
    )
    return data.to_yaml()


def _bit_architecture(config: BiTConfig, num_params: int) -> list[tuple[str, Any]]:
    resnet = config.resnet
    return [
        ("model", config.name or "custom"),
        ("image size", " x ".join(map(str, config.image_size))),
        ("units per stage", ", ".join(map(str, resnet.layers))),
        ("root width / GroupNorm groups", f"{resnet.width} / {resnet.num_groups}"),
        ("stem", f"{resnet.stem} (total stride {resnet.stride})"),
        ("classes", config.num_classes),
        ("parameters", f"{num_params / 1e6:.2f}M"),
    ]


def _architecture(config: ViTConfig | BiTConfig, num_params: int) -> list[tuple[str, Any]]:
    if isinstance(config, BiTConfig):
        return _bit_architecture(config, num_params)
    height, width = config.image_size
    grid_h, grid_w = config.grid_size
    prefix = config.num_prefix_tokens
    tokens = f"{grid_h} x {grid_w} patches" + (f" + {prefix} class token" if prefix else "")
    return [
        ("model", config.name or "custom"),
        ("image size", f"{height} x {width}"),
        ("patch size", config.patch_size),
        ("tokens", tokens),
        ("width D / depth / heads / MLP", f"{config.dim} / {config.depth} / {config.num_heads} / {config.mlp_dim}"),
        ("pooling", POOLING.get(config.pool, config.pool)),
        (
            "position embedding",
            POSITIONS.get(config.pos_embed, config.pos_embed)
            + {
                "every_layer": ", one per layer, added before each",
                "every_layer_shared": ", added before every layer",
            }.get(config.pos_embed_at, ""),
        ),
        ("representation layer", config.representation_size or "none"),
        ("numerics", f"act {config.act}, LayerNorm eps {config.norm_eps:g}"),
        ("classes", config.num_classes),
        ("parameters", f"{num_params / 1e6:.2f}M"),
    ]


def _preprocessing(config: ViTConfig | BiTConfig) -> list[tuple[str, Any]]:
    pre = config.preprocessing
    height, width = config.image_size
    scaled = (math.floor(height / pre.crop_pct), math.floor(width / pre.crop_pct))
    resize = (
        ("resize to", f"{scaled[0]} x {scaled[1]} px ({pre.interpolation}, aspect ratio not kept)")
        if crop_mode_for(config.image_size, pre.crop_mode) == "squash"
        else ("resize to cover", f"{scaled[0]} x {scaled[1]} px ({pre.interpolation}, aspect ratio kept)")
    )
    return [
        resize,
        ("centre crop", f"{height} x {width}"),
        ("mean", ", ".join(f"{m:g}" for m in pre.mean)),
        ("std", ", ".join(f"{s:g}" for s in pre.std)),
    ]


def _classes(config: ViTConfig | BiTConfig) -> str:
    names = config.class_names
    if not names:
        return (
            f"{config.num_classes} classes, unnamed." if config.num_classes else "No classifier head (features only)."
        )
    shown = ", ".join(f"`{name}`" for name in names[:MAX_CLASSES_SHOWN])
    more = (
        f", ... ({len(names) - MAX_CLASSES_SHOWN} more; all in config.json)" if len(names) > MAX_CLASSES_SHOWN else ""
    )
    return f"{len(names)} classes: {shown}{more}."


USAGE = """```python
import vitlab

model = vitlab.load("{source}")  # {where}
logits = model(images)  # images (B, 3, {height}, {width}), normalised as above
```

```bash
vitlab export --ckpt {source} --format onnx --out model.onnx
vitlab serve --ckpt {source}
```"""


def model_card(config: ViTConfig | BiTConfig, num_params: int, extra: dict[str, Any], source: str) -> str:
    """The README.md text for a model with this config and `extra` (as save_pretrained stores it)."""
    training, metrics = split_summary(extra)
    bit = isinstance(config, BiTConfig)
    title = config.name or ("BiT ResNet" if bit else "Vision Transformer")
    what = (
        "A BiT ResNet (Kolesnikov et al. 2020), the convolutional baseline of the Vision Transformer paper,"
        if bit
        else "A Vision Transformer (Dosovitskiy et al., *An Image is Worth 16x16 Words*, ICLR 2021)"
    )
    parts = [
        f"---\n{_metadata(config, training, metrics, extra)}\n---",
        f"# {title}",
        f"{what} saved by vitlab: `config.json` holds the architecture, {'' if bit else 'numerics, '}"
        "preprocessing and class names, "
        "`model.safetensors` the weights.",
        "## Architecture",
        _table(_architecture(config, num_params)),
        "## Preprocessing",
        _table(_preprocessing(config)),
        "## Classes",
        _classes(config),
    ]
    if training:
        parts += ["## Training", _table(sorted(training.items()))]
    if metrics:
        parts += ["## Results", _table(sorted(metrics.items()))]
    height, width = config.image_size
    where = (
        "this Hub repository"
        if source.startswith("hf://")
        else 'this folder, or "hf://ORG/NAME" once uploaded to the Hub'
    )
    parts += ["## Usage", USAGE.format(source=source, where=where, height=height, width=width)]
    return "\n\n".join(parts) + "\n"


def write_model_card(
    directory: Path, config: ViTConfig | BiTConfig, num_params: int, extra: dict[str, Any], source: str | None = None
) -> Path:
    """README.md in `directory`; its usage loads `source` (default: the folder's name; "hf://ORG/NAME" for an upload)."""
    path = Path(directory) / CARD_FILE
    text = model_card(config, num_params, extra, source=source or Path(directory).resolve().name)
    # a path that is not UTF-8 (its odd bytes come as surrogates) is shown escaped: the card stays UTF-8
    path.write_text(text, encoding="utf-8", errors="backslashreplace")
    return path
