"""Catalogue weights as models: `vitlab.load("B/16:augreg-in21k")`, `create_model("B/16", pretrained=TAG)`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitlab.model import BiTConfig, BiTResNet, ConfigError, ViTConfig, VisionTransformer, config_for
from vitlab.model import create_model as create_untrained

from .catalogue import IN1K_CLASSES, Pretrained, find
from .errors import CheckpointError
from .fetch import fetch
from .load import load_file

# The numerics of the reference code the weights were trained with (vit_jax, Flax): they apply
# whichever of an entry's files is read, so a converted copy computes what the official one does.
VIT_JAX_NUMERICS = dict(act="gelu_tanh", norm_eps=1e-6, pos_resample="linear_zoom", pos_resample_antialias=False)


def check_matches(entry: Pretrained, path: Path) -> VisionTransformer:
    """Load `path` and check it is the model the entry names: a file recorded under the wrong name
    (or replaced at its source) is refused before it enters the cache."""
    model = load_file(path)
    config, expected = model.config, config_for(entry.model)
    found = {
        "patch size": (config.patch_size, expected.patch_size), "width": (config.dim, expected.dim),
        "depth": (config.depth, expected.depth), "classes": (config.num_classes, entry.num_classes),
        "image size": (config.image_size, (entry.image_size, entry.image_size)),
    }
    wrong = [f"{what} {got} (expected {want})" for what, (got, want) in found.items() if got != want]
    if wrong:
        raise CheckpointError(f"{entry.name}: {path.name} is not this model: {', '.join(wrong)}")
    return model


def imagenet_class_names() -> list[str]:
    """The 1000 ImageNet-1k class names in the standard (sorted-synset) order, which is also the
    label order of the vit_jax checkpoints; torchvision ships them with its weight metadata."""
    from torchvision.models import ViT_B_16_Weights

    return list(ViT_B_16_Weights.IMAGENET1K_V1.meta["categories"])


def load_pretrained(name: str, **overrides: Any) -> VisionTransformer:
    """The model of catalogue entry "MODEL:TAG", downloaded into the cache on first use.

    Overrides work as in `vitlab.load`: e.g. num_classes=10 resets the head for fine-tuning and
    image_size=384 resamples E_pos.
    """
    entry = find(name)
    path = fetch(entry, check=lambda file: check_matches(entry, file))
    options = dict(VIT_JAX_NUMERICS, preprocessing=entry.preprocessing, name=entry.name)
    if entry.num_classes == IN1K_CLASSES and "num_classes" not in overrides:  # a new head has its own names
        options["class_names"] = imagenet_class_names()
    options.update(overrides)
    return load_file(path, **options)


def create_model(
    name: str | ViTConfig | BiTConfig = "B/16", pretrained: str | None = None, **overrides: Any
) -> VisionTransformer | BiTResNet:
    """A model from the registry, freshly initialised or, with `pretrained`, with catalogue weights.

    >>> model = create_model("B/16", pretrained="augreg-in21k", num_classes=10)  # doctest: +SKIP

    `pretrained` is a TAG of the model ("augreg-in21k") or a full "MODEL:TAG" name.
    """
    if pretrained is None:
        return create_untrained(name, **overrides)
    if not isinstance(name, str):
        raise ConfigError("pretrained= needs a registered model name such as 'B/16', not a config")
    entry = find(pretrained if ":" in pretrained else f"{name}:{pretrained}")
    if entry.model != name:
        raise ConfigError(f"pretrained={pretrained!r} holds weights of {entry.model}, not of {name}")
    return load_pretrained(entry.name, **overrides)
