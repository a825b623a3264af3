"""Names shared with timm: its ViT model names as aliases of vitlab's ("vit_base_patch16_224" ->
"B/16" at 224 px) and the timm architecture a vitlab config is (for `pretrained_cfg` and export).

timm's plain ViT names are vit_{size}_patch{P}_{resolution}[.{tag}]; its AugReg / paper hybrids
are spelled after the backbone (vit_small_r26_s32_224 is vitlab's R26+S/32).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .config import ViTConfig
from .variants import SIZES

# timm's size words and vitlab's size names (timm's "medium" is another width, so it is not here).
TIMM_SIZES = {"tiny": "Ti", "small": "S", "base": "B", "large": "L", "huge": "H"}
# timm's hybrid names (vision_transformer_hybrid.py) without the resolution.
TIMM_HYBRIDS = {
    "vit_tiny_r_s16_p8": "R+Ti/16",
    "vit_small_r26_s32": "R26+S/32",
    "vit_base_r26_s32": "R26+B/32",
    "vit_base_r50_s16": "R50+B/16",
    "vit_large_r50_s32": "R50+L/32",
}
# Plain (class-token) ViTs timm registers; checked against timm.list_models in the tests.
TIMM_PLAIN = {
    "vit_tiny_patch16_224",
    "vit_tiny_patch16_384",
    "vit_small_patch32_224",
    "vit_small_patch32_384",
    "vit_small_patch16_224",
    "vit_small_patch16_384",
    "vit_small_patch8_224",
    "vit_base_patch32_224",
    "vit_base_patch32_384",
    "vit_base_patch16_224",
    "vit_base_patch16_384",
    "vit_base_patch8_224",
    "vit_large_patch32_224",
    "vit_large_patch32_384",
    "vit_large_patch16_224",
    "vit_large_patch16_384",
    "vit_large_patch14_224",
    "vit_huge_patch14_224",
}
PLAIN = re.compile(r"^vit_(?P<size>[a-z]+)_patch(?P<patch>\d+)_(?P<res>\d+)$")
HYBRID = re.compile(r"^(?P<arch>vit_[a-z]+_r\w*?_s\d+(?:_p\d+)?)_(?P<res>\d+)$")


@dataclass(frozen=True)
class TimmAlias:
    """What a timm model name means in vitlab: the registry name, resolution and weights tag."""

    model: str
    image_size: int
    tag: str | None  # a vitlab catalogue tag ("augreg-in21k-ft-in1k"), from timm's ".augreg_in21k_ft_in1k"


def is_timm_name(name: object) -> bool:
    return isinstance(name, str) and name.startswith("vit_")


def from_timm_name(name: str) -> TimmAlias | None:
    """ "vit_base_patch16_384.augreg_in21k_ft_in1k" -> TimmAlias("B/16", 384, "augreg-in21k-ft-in1k-384");
    None for a name that is not one of timm's ViT names vitlab builds."""
    arch, _, timm_tag = name.partition(".")
    model = None
    if (match := PLAIN.match(arch)) and match["size"] in TIMM_SIZES and arch in TIMM_PLAIN:
        model = f"{TIMM_SIZES[match['size']]}/{match['patch']}"
    elif (match := HYBRID.match(arch)) and match["arch"] in TIMM_HYBRIDS:
        model = TIMM_HYBRIDS[match["arch"]]
    if model is None:
        return None
    assert match is not None  # the branch that set `model` matched
    size = int(match["res"])
    tag = None
    if timm_tag:
        tag = timm_tag.replace("_", "-")
        # timm puts the resolution in the name; vitlab's tags carry it where one run has two:
        # AugReg's 384-px fine-tunes are "-384", the paper's 224-px fine-tunes "-224".
        if size == 384 and tag.startswith("augreg"):
            tag += "-384"
        elif size == 224 and tag == "orig-in21k-ft-in1k":
            tag += "-224"
    return TimmAlias(model, size, tag)


def timm_architecture(config: ViTConfig) -> str | None:
    """The registered timm name whose defaults are this plain ViT's sizes, or None."""
    if config.backbone is not None or config.pool != "token" or config.image_size[0] != config.image_size[1]:
        return None
    for word, size_name in TIMM_SIZES.items():
        size = SIZES[size_name]
        if (size.dim, size.depth, size.num_heads, size.mlp_dim) == (
            config.dim,
            config.depth,
            config.num_heads,
            config.mlp_dim,
        ):
            name = f"vit_{word}_patch{config.patch_size}_{config.image_size[0]}"
            return name if name in TIMM_PLAIN else None
    return None


def timm_first_conv(config: ViTConfig) -> str:
    """timm's name of the first convolution; its stem-only hybrid holds the stem as the backbone."""
    if config.backbone is None:
        return "patch_embed.proj"
    return "patch_embed.backbone.stem.conv" if config.backbone.layers else "patch_embed.backbone.conv"
