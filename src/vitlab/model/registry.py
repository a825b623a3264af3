"""create_model("B/16", ...) and the list of registered variants that tests iterate over."""

from __future__ import annotations

from typing import Any

from vitlab.errors import ConfigError

from .aliases import from_timm_name, is_timm_name
from .bit import BIT_MODELS, BiTConfig, BiTResNet, bit_config, is_bit_name
from .budget import check_memory
from .config import ViTConfig
from .hybrid import HYBRIDS, hybrid_variant, is_hybrid_name
from .variants import PAPER_PATCH_SIZES, SIZES, parse_variant
from .vit import VisionTransformer

# Registered: every size of the table with the paper's patch sizes. Other patch sizes ("Ti/4",
# "S/2") are built on request, they are just not enumerated.
REGISTERED_SIZES = ("Ti", "S", "M", "B", "L", "H")


def list_models(family: str = "vit") -> list[str]:
    """Registered names of one family: "vit" ("B/16"), "hybrid" ("R50+B/16"), "bit" ("BiT-R50x1"), or "all"."""
    families = {
        "vit": [f"{size}/{patch}" for size in REGISTERED_SIZES for patch in PAPER_PATCH_SIZES],
        "hybrid": list(HYBRIDS),
        "bit": list(BIT_MODELS),
    }
    if family == "all":
        return [name for names in families.values() for name in names]
    if family not in families:
        raise ConfigError(f"unknown model family {family!r}; choose one of {', '.join(families)}, all")
    return families[family]


def config_for(name: str, **overrides: Any) -> ViTConfig | BiTConfig:
    """The config of a variant ("B/16", "R50+B/16", "BiT-R50x1") with any field overridden
    (image_size=384, pool="gap", ...)."""
    if is_timm_name(name):  # timm's names are aliases: "vit_base_patch16_384" is B/16 at 384 px
        alias = from_timm_name(name)
        if alias is None:
            raise ConfigError(
                f"{name!r} is not a timm ViT vitlab builds; it reads vit_{{tiny,small,base,large,huge}}_patchP_RES "
                "and timm's R+ViT hybrids (vitlab models lists vitlab's own names)"
            )
        overrides.setdefault("image_size", alias.image_size)
        return config_for(alias.model, **overrides)
    if is_bit_name(name):
        return bit_config(name, **overrides)
    hybrid: dict[str, Any] = {}
    variant = name
    if is_hybrid_name(name):
        variant, hybrid = hybrid_variant(name)
    size, patch_size = parse_variant(variant)
    fields = dict(
        **hybrid,
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


def create_model(
    name: str | ViTConfig | BiTConfig = "B/16", *, memory_limit: int | None = None, **overrides: Any
) -> VisionTransformer | BiTResNet:
    """Build a freshly initialised model from a registered name or a config (a BiTConfig gives
    the BiT ResNet, a ViTConfig with a backbone the hybrid).

    Nothing is allocated before the parameter count is checked against `memory_limit` bytes
    (default: budget.DEFAULT_FRACTION of the memory available; budget.py).

    >>> model = create_model("Ti/4", image_size=32, num_classes=10)
    """
    if isinstance(name, (ViTConfig, BiTConfig)):
        config = name.replace(**overrides) if overrides else name
    else:
        config = config_for(name, **overrides)
    check_memory(config, limit=memory_limit, source=config.name)
    return BiTResNet(config) if isinstance(config, BiTConfig) else VisionTransformer(config)


__all__ = ["create_model", "config_for", "list_models", "SIZES"]
