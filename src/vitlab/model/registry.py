"""create_model("B/16", ...) and the list of registered variants that tests iterate over."""

from __future__ import annotations

from typing import Any

from .config import ConfigError, ViTConfig
from .variants import PAPER_PATCH_SIZES, SIZES, parse_variant
from .vit import VisionTransformer

# Registered: every size of the table with the paper's patch sizes. Other patch sizes ("Ti/4",
# "S/2") are built on request, they are just not enumerated.
REGISTERED_SIZES = ("Ti", "S", "M", "B", "L", "H")


def list_models() -> list[str]:
    return [f"{size}/{patch}" for size in REGISTERED_SIZES for patch in PAPER_PATCH_SIZES]


def config_for(name: str, **overrides: Any) -> ViTConfig:
    """The config of a variant ("B/16") with any field overridden (image_size=384, pool="gap", ...)."""
    size, patch_size = parse_variant(name)
    fields = dict(
        name=name,
        patch_size=patch_size,
        dim=size.dim,
        depth=size.depth,
        mlp_dim=size.mlp_dim,
        num_heads=size.num_heads,
    )
    fields.update(overrides)
    try:
        return ViTConfig(**fields)
    except TypeError as error:  # an unknown keyword
        raise ConfigError(f"bad option for {name!r}: {error}") from None


def create_model(name: str | ViTConfig = "B/16", **overrides: Any) -> VisionTransformer:
    """Build a freshly initialised ViT from a variant name or a ViTConfig.

    >>> model = create_model("Ti/4", image_size=32, num_classes=10)
    """
    if isinstance(name, ViTConfig):
        config = name.replace(**overrides) if overrides else name
    else:
        config = config_for(name, **overrides)
    return VisionTransformer(config)


__all__ = ["create_model", "config_for", "list_models", "SIZES"]
