"""The variant table (paper Table 1, plus the reference code's smaller sizes), name parsing, and
the ViT family of the registry.

A name is "SIZE/PATCH", e.g. "B/16" or "Ti/4"; any size goes with any patch size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vitlab.errors import ConfigError

from .config import ViTConfig
from .registry import Family, make_config, register_family


@dataclass(frozen=True)
class Size:
    dim: int
    depth: int
    mlp_dim: int
    num_heads: int


# Table 1 of the paper (B, L, H) and big_vision's decode_variant for the others.
SIZES: dict[str, Size] = {
    "mu": Size(dim=32, depth=1, mlp_dim=128, num_heads=2),
    "Ti": Size(dim=192, depth=12, mlp_dim=768, num_heads=3),
    "S": Size(dim=384, depth=12, mlp_dim=1536, num_heads=6),
    "M": Size(dim=512, depth=12, mlp_dim=2048, num_heads=8),
    "B": Size(dim=768, depth=12, mlp_dim=3072, num_heads=12),
    "L": Size(dim=1024, depth=24, mlp_dim=4096, num_heads=16),
    "H": Size(dim=1280, depth=32, mlp_dim=5120, num_heads=16),
}

PAPER_PATCH_SIZES = (8, 14, 16, 32)


def parse_variant(name: str) -> tuple[Size, int]:
    """ "B/16" -> (Size of Base, 16). Raises ConfigError naming the bad part."""
    size_name, sep, patch = name.partition("/")
    if not sep or not patch.isdigit():
        raise ConfigError(f"variant {name!r} is not of the form SIZE/PATCH (e.g. 'B/16'); sizes: {', '.join(SIZES)}")
    if size_name not in SIZES:
        raise ConfigError(f"unknown model size {size_name!r} in {name!r}; sizes: {', '.join(SIZES)}")
    patch_size = int(patch)
    if patch_size <= 0:
        raise ConfigError(f"patch size must be positive in {name!r}")
    return SIZES[size_name], patch_size


def vit_config(name: str, variant: str | None = None, /, **overrides: Any) -> ViTConfig:
    """The ViTConfig of `name`, of the form SIZE/PATCH unless `variant` gives the SIZE/PATCH it stands
    for (a hybrid's "R50+B/16" is B/1 on a backbone), with any field overridden."""
    size, patch_size = parse_variant(variant or name)
    fields: dict[str, Any] = dict(
        name=name, patch_size=patch_size, dim=size.dim, depth=size.depth, mlp_dim=size.mlp_dim, num_heads=size.num_heads
    )
    fields.update(overrides)
    return make_config(ViTConfig, name, fields)


# Registered: every size of the table with the paper's patch sizes. Other patch sizes ("Ti/4",
# "S/2") are built on request, they are just not enumerated.
REGISTERED_SIZES = ("Ti", "S", "M", "B", "L", "H")

# The ViT takes every name no other family claims, so that a bad one is named by parse_variant.
register_family(
    Family("vit", tuple(f"{size}/{patch}" for size in REGISTERED_SIZES for patch in PAPER_PATCH_SIZES), vit_config)
)
