"""The hybrid's patch embedding (paper Sec. 3.1): "the input sequence can be formed from feature
maps of a CNN ... the patch embedding projection E is applied to patches extracted from a CNN
feature map"; with patch size 1 every feature-map pixel becomes a token (Sec. 4.1)."""

from __future__ import annotations

from typing import Any

import torch

from vitlab.errors import ConfigError

from .config import ViTConfig
from .patch_embed import PatchEmbedding
from .registry import Family, register_family
from .resnet import ResNet, ResNetConfig, StemKind
from .variants import vit_config


class HybridEmbedding(PatchEmbedding):
    """ResNet feature map -> PatchEmbedding on it; the grid is image size / (backbone stride x P)."""

    def __init__(self, backbone: ResNetConfig, patch_size: int, in_channels: int, dim: int) -> None:
        super().__init__(patch_size, backbone.out_channels, dim)
        self.backbone = ResNet(backbone, in_channels)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """(B, C, H, W) -> tokens (B, N, D), row-major over the feature map, and its grid."""
        return super().forward(self.backbone(images))  # backbone: (B, C', H/s, W/s)


# Registered hybrids: name -> (ViT size, units per stage, stem). The /N of a name is the effective
# patch size, backbone stride x patch size 1 (Sec. 4.1): R50+B/32 takes ResNet-50's stage 4
# output; R50+B/16 removes stage 4 and gives stage 3 nine units, a 4x longer sequence.
HYBRIDS: dict[str, tuple[str, tuple[int, ...], StemKind]] = {
    "R50+B/16": ("B", (3, 4, 9), "standard"),
    "R50+B/32": ("B", (3, 4, 6, 3), "standard"),
    "R50+L/32": ("L", (3, 4, 6, 3), "standard"),
    "R26+S/32": ("S", (2, 2, 2, 2), "standard"),  # AugReg's hybrids (Steiner et al. 2021)
    # AugReg's R+Ti/16 keeps only the ResNet's stem (stride 4) and cuts 8x8 patches from its map:
    # the release's own name, though one token covers 32x32 pixels (a 7x7 grid at 224 px).
    "R+Ti/16": ("Ti", (), "standard"),
    "R26+B/32": ("B", (2, 2, 2, 2), "standard"),
    # For 16-32 px images: a 3x3/1 stem and three stages, a 8x8 grid at 32 px like Ti/4.
    "R20-small+Ti/4": ("Ti", (2, 2, 2), "small"),
    "R20-small+S/4": ("S", (2, 2, 2), "small"),
}


# Patch size on the feature map where it is not 1.
HYBRID_PATCH_SIZES = {"R+Ti/16": 8}


def is_hybrid_name(name: str) -> bool:
    return "+" in name


def hybrid_variant(name: str) -> tuple[str, dict[str, Any]]:
    """ "R50+B/16" -> ("B/1", the ViTConfig fields that make it a hybrid: backbone, image size)."""
    if name not in HYBRIDS:
        raise ConfigError(f"unknown hybrid {name!r}; registered: {', '.join(HYBRIDS)}")
    size, layers, stem = HYBRIDS[name]
    backbone = ResNetConfig(layers=layers, stem=stem)
    return f"{size}/{HYBRID_PATCH_SIZES.get(name, 1)}", dict(
        backbone=backbone, image_size=32 if stem == "small" else 224
    )


def hybrid_config(name: str, **overrides: Any) -> ViTConfig:
    """ "R50+B/16" -> the ViTConfig of B/1 on the R50 backbone, any field overridden."""
    variant, hybrid = hybrid_variant(name)
    return vit_config(name, variant, **{**hybrid, **overrides})


register_family(Family("hybrid", tuple(HYBRIDS), hybrid_config, claims=is_hybrid_name))
