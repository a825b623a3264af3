"""The variant table (paper Table 1, plus the reference code's smaller sizes) and name parsing.

A name is "SIZE/PATCH", e.g. "B/16" or "Ti/4"; any size goes with any patch size.
"""

from __future__ import annotations

from dataclasses import dataclass

from vitlab.errors import ConfigError


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
    """"B/16" -> (Size of Base, 16). Raises ConfigError naming the bad part."""
    size_name, sep, patch = name.partition("/")
    if not sep or not patch.isdigit():
        raise ConfigError(
            f"variant {name!r} is not of the form SIZE/PATCH (e.g. 'B/16'); sizes: {', '.join(SIZES)}"
        )
    if size_name not in SIZES:
        raise ConfigError(f"unknown model size {size_name!r} in {name!r}; sizes: {', '.join(SIZES)}")
    patch_size = int(patch)
    if patch_size <= 0:
        raise ConfigError(f"patch size must be positive in {name!r}")
    return SIZES[size_name], patch_size
