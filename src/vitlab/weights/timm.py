"""timm VisionTransformer state dicts (.pth / .safetensors).

timm's key names are vitlab's (its layering Attention -> Block -> VisionTransformer is the one
vitlab follows), except E_pos (`pos_embed`, a bare parameter) and the old representation layer
(`pre_logits.fc`). Numerics: exact-erf GELU, LayerNorm epsilon 1e-6, E_pos resampled bicubic
with antialiasing (timm's resample_abs_pos_embed). The head count is not in the weights.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

import torch

from vitlab.model import Preprocessing, ViTConfig

from .errors import CheckpointError
from .infer import default_num_heads, infer_image_size
from .keys import count_blocks, patch_conv_sizes, rename_keys, require

RULES = [
    (r"^pos_embed$", "pos_embed.weight"),
    (r"^pre_logits\.fc\.", "pre_logits.0."),
]
TIMM_PREPROCESSING = Preprocessing(mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=0.9, interpolation="bicubic")


def is_timm_state_dict(state: Mapping[str, torch.Tensor]) -> bool:
    return "patch_embed.proj.weight" in state and "pos_embed" in state


def position_layout(
    table_length: int, class_token: bool, patch_size: int, hint: Any, source: str
) -> tuple[tuple[int, int], bool]:
    """(native image size, whether E_pos has a class-token slot) for a (1, T, D) table.

    timm's `no_embed_class` models add E_pos to the patches only; the class token then has no
    position vector, which is the same as a zero one in vitlab's table.
    """
    if class_token:
        try:
            return infer_image_size(table_length - 1, patch_size, hint, source), True
        except CheckpointError:
            return infer_image_size(table_length, patch_size, hint, source), False
    return infer_image_size(table_length, patch_size, hint, source), False


def convert_timm(
    state: Mapping[str, torch.Tensor], source: str, overrides: dict[str, Any]
) -> tuple[ViTConfig, dict[str, torch.Tensor]]:
    """timm state dict -> (vitlab config, vitlab state dict); consumes the num_heads override."""
    dim, channels, patch = patch_conv_sizes(require(state, "patch_embed.proj.weight", source), source)
    class_token = "cls_token" in state
    fc_norm = "fc_norm.weight" in state
    if class_token and fc_norm:
        raise CheckpointError(
            f"{source}: average pooling beside a class token (fc_norm with cls_token) is not a vitlab model"
        )
    image_size, class_slot = position_layout(
        state["pos_embed"].shape[1], class_token, patch, overrides.get("image_size"), source
    )
    state = rename_keys(state, RULES)
    if class_token and not class_slot:
        pos = state["pos_embed.weight"]
        state["pos_embed.weight"] = torch.cat([pos.new_zeros(1, 1, pos.shape[-1]), pos], dim=1)
    representation = state["pre_logits.0.weight"].shape[0] if "pre_logits.0.weight" in state else None
    config = ViTConfig(
        image_size=image_size, patch_size=patch, in_channels=channels,
        num_classes=state["head.weight"].shape[0] if "head.weight" in state else 0,
        dim=dim, depth=count_blocks(state, r"blocks\.(\d+)\.", source),
        num_heads=overrides.pop("num_heads", None) or default_num_heads(dim, source),
        mlp_dim=require(state, "blocks.0.mlp.fc1.weight", source).shape[0],
        pool="token" if class_token else "gap", gap_norm="after_pool" if fc_norm else "before_pool",
        representation_size=representation, qkv_bias="blocks.0.attn.qkv.bias" in state,
        act="gelu", norm_eps=1e-6, pos_resample="bicubic", pos_resample_antialias=True,
        preprocessing=dataclasses.replace(TIMM_PREPROCESSING), name=Path(source).stem,
    )
    return config, state

