"""Names shared with timm: its ViT model names as aliases of vitlab's ("vit_base_patch16_224" ->
"B/16" at 224 px) and the timm architecture a vitlab config is (for `pretrained_cfg` and export).

timm's plain ViT names are vit_{size}_patch{P}_{resolution}[.{tag}]; its AugReg / paper hybrids
are spelled after the backbone (vit_small_r26_s32_224 is vitlab's R26+S/32).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from vitlab.errors import ConfigError

from .config import Pooling, ViTConfig
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
# timm's other names of models vitlab builds: architecture -> (vitlab model, resolution, its options).
TIMM_NAMED: dict[str, tuple[str, int, dict[str, Any]]] = {
    "vit_base_patch16_gap_224": (
        "B/16",
        224,
        dict(num_heads=16, pool="gap", class_token=False, gap_norm="before_pool"),
    ),
    "deit_tiny_patch16_224": ("Ti/16", 224, {}),
    "deit_small_patch16_224": ("S/16", 224, {}),
    "deit_base_patch16_224": ("B/16", 224, {}),
    "deit_base_patch16_384": ("B/16", 384, {}),
    **{
        f"resnetv2_{depth}x{width}_bit": (f"BiT-R{depth}x{width}", 224, {})
        for depth, width in ((50, 1), (50, 3), (101, 1), (101, 3), (152, 2), (152, 4))
    },
}
# timm's global_pool names for vitlab's pool options; vitlab's own names are accepted too.
TIMM_POOL: dict[Pooling, str] = dict(token="token", gap="avg", max="max", avgmax="avgmax", none="", map="map")
POOL_FROM_TIMM: dict[str, Pooling] = {
    **{timm: ours for ours, timm in TIMM_POOL.items()},
    **{ours: ours for ours in TIMM_POOL},
}
# The global_pools after which timm's VisionTransformer normalises the pooled vector when fc_norm is None.
TIMM_FC_NORM_POOLS = ("avg", "avgmax", "max")
# timm's create_model keywords and the config fields they set (timm's VisionTransformer / ResNetV2).
TIMM_KEYWORDS = {
    "img_size": "image_size",
    "in_chans": "in_channels",
    "embed_dim": "dim",
    "drop_rate": "head_dropout",
    "proj_drop_rate": "dropout",
    "attn_drop_rate": "attn_dropout",
    "drop_path_rate": "drop_path",
    "act_layer": "act",
}
PLAIN = re.compile(r"^vit_(?P<size>[a-z]+)_patch(?P<patch>\d+)_(?P<res>\d+)$")
HYBRID = re.compile(r"^(?P<arch>vit_[a-z]+_r\w*?_s\d+(?:_p\d+)?)_(?P<res>\d+)$")


@dataclass(frozen=True)
class TimmAlias:
    """What a timm model name means in vitlab: the registry name, resolution and weights tag."""

    model: str
    image_size: int
    tag: str | None  # a vitlab catalogue tag ("augreg-in21k-ft-in1k"), from timm's ".augreg_in21k_ft_in1k"
    options: dict[str, Any] = field(default_factory=dict)  # what the timm name sets beyond the size


def is_timm_name(name: object) -> bool:
    return isinstance(name, str) and (name.startswith("vit_") or name.partition(".")[0] in TIMM_NAMED)


def from_timm_name(name: str) -> TimmAlias | None:
    """ "vit_base_patch16_384.augreg_in21k_ft_in1k" -> TimmAlias("B/16", 384, "augreg-in21k-ft-in1k-384");
    None for a name that is not one of timm's ViT names vitlab builds."""
    arch, _, timm_tag = name.partition(".")
    model = None
    if arch in TIMM_NAMED:
        model, size, options = TIMM_NAMED[arch]
        return TimmAlias(model, size, timm_tag.replace("_", "-") if timm_tag else None, options)
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
    square = config.image_size[0] == config.image_size[1]
    if config.backbone is not None or config.distillation_token or config.pool != "token" or not square:
        return None  # a hybrid, DeiT's distilled class, another pooling or size: no plain timm name
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


def from_timm_keywords(options: dict[str, Any]) -> dict[str, Any]:
    """timm's create_model keywords (img_size, in_chans, drop_path_rate, global_pool, fc_norm, ...) as
    config fields; vitlab's own names pass as they are, and a field given both ways is refused.
    mlp_ratio is returned as is: the width it multiplies is the config's. As in timm, global_pool
    keeps the class token (vitlab's pool="gap" alone builds the paper's GAP model, without one)."""
    fields: dict[str, Any] = {}
    if "global_pool" in options and "class_token" not in options:
        fields["class_token"] = True
    if (
        options.get("fc_norm") is None
        and "gap_norm" not in options
        and options.get("global_pool") in TIMM_FC_NORM_POOLS
    ):
        fields["gap_norm"] = "after_pool"  # timm's fc_norm=None: the norm after pooling for these pools
    for key, value in options.items():
        if key == "global_pool":
            key, value = "pool", POOL_FROM_TIMM.get(value, value)
        elif key == "fc_norm" and value is not None:
            key, value = "gap_norm", "after_pool" if value else "before_pool"
        elif key == "fc_norm":
            continue  # timm's None: its default placement, set above
        else:
            key = TIMM_KEYWORDS.get(key, key)
        if key in fields:
            raise ConfigError(f"{key} is given twice (timm's and vitlab's names of one field)")
        fields[key] = value
    return fields
