"""timm VisionTransformer state dicts (.pth / .safetensors).

timm's key names are vitlab's (its layering Attention -> Block -> VisionTransformer is the one
vitlab follows), except E_pos (`pos_embed`, a bare parameter) and the old representation layer
(`pre_logits.fc`). Numerics: exact-erf GELU, LayerNorm epsilon 1e-6, E_pos resampled bicubic
with antialiasing (timm's resample_abs_pos_embed). The head count is not in the weights: it comes
from num_heads= or from the table of timm's architectures (heads.py).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from vitlab.errors import CheckpointError
from vitlab.model import ConfigError, Preprocessing, ViTConfig
from vitlab.model.config import Activation

from .heads import Signature, activation_for, architecture, read_signature, refuse_unholdable
from .keys import rename_keys
from .position_grid import position_layout

RULES = [
    (r"^pos_embed$", "pos_embed.weight"),
    (r"^pre_logits\.fc\.", "pre_logits.0."),
]
TIMM_PREPROCESSING = Preprocessing(mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=0.9, interpolation="bicubic")


def is_timm_state_dict(state: Mapping[str, torch.Tensor]) -> bool:
    return "patch_embed.proj.weight" in state and "pos_embed" in state


def timm_signature(state: Mapping[str, torch.Tensor], source: str) -> Signature:
    """What the shapes show of the architecture; refuses what vitlab's ViT cannot hold."""
    refuse_unholdable(state, source)
    if "cls_token" in state and "fc_norm.weight" in state:
        raise CheckpointError(
            f"{source}: average pooling beside a class token (fc_norm with cls_token) is not a vitlab model"
        )
    return read_signature(rename_keys(state, RULES), "timm", source)


def table_activation(act: str) -> Activation:
    """A table activation as ViTConfig's type; one vitlab lacks is refused as ViTConfig refuses it."""
    for known in typing.get_args(Activation):
        if act == known:
            return known
    raise ConfigError(f"unknown act {act!r}; choose one of {typing.get_args(Activation)}")


def convert_timm(
    state: Mapping[str, torch.Tensor], source: str, overrides: dict[str, Any]
) -> tuple[ViTConfig, dict[str, torch.Tensor]]:
    """timm state dict -> (vitlab config, vitlab state dict); consumes the num_heads override.

    Without num_heads= the head count and activation come from the table of timm's architectures;
    with it, the activation of the table's architectures of that signature and head count, else
    timm's default (exact GELU).
    """
    signature = timm_signature(state, source)
    num_heads = overrides.pop("num_heads", None)
    if num_heads is None:
        behaviour = architecture(signature, source)
        num_heads, act = behaviour.num_heads, table_activation(behaviour.act)
    elif "act" in overrides:
        act = overrides["act"]
    else:
        act = table_activation(activation_for(signature, num_heads, source) or "gelu")
    image_size, class_slot = position_layout(
        state["pos_embed"].shape[1], signature.class_token, signature.patch_size, overrides.get("image_size"), source
    )
    state = rename_keys(state, RULES)
    if signature.class_token and not class_slot:
        pos = state["pos_embed.weight"]
        state["pos_embed.weight"] = torch.cat([pos.new_zeros(1, 1, pos.shape[-1]), pos], dim=1)
    config = ViTConfig(
        image_size=image_size,
        patch_size=signature.patch_size,
        in_channels=state["patch_embed.proj.weight"].shape[1],
        num_classes=state["head.weight"].shape[0] if "head.weight" in state else 0,
        dim=signature.dim,
        depth=signature.depth,
        num_heads=num_heads,
        mlp_dim=signature.mlp_dim,
        pool="token" if signature.class_token else "gap",
        gap_norm="after_pool" if signature.fc_norm else "before_pool",
        representation_size=signature.representation_size,
        qkv_bias=signature.qkv_bias,
        act=act,
        norm_eps=1e-6,
        pos_resample="bicubic",
        pos_resample_antialias=True,
        preprocessing=dataclasses.replace(TIMM_PREPROCESSING),
        name=Path(source).stem,
    )
    return config, state
