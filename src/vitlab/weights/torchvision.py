"""torchvision `vit_*` state dicts (torchvision.models.VisionTransformer).

Numerics: exact-erf GELU, LayerNorm epsilon 1e-6, class token only, square images; E_pos
resampled as torchvision's interpolate_embeddings does (bicubic, align_corners=True). Its attention
is nn.MultiheadAttention, whose in_proj_weight stacks q, k, v head-major as vitlab's qkv does.
The head count is not in the weights: it comes from num_heads= or from the table of torchvision's
architectures (head_counts.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from vitlab.errors import CheckpointError
from vitlab.model import Preprocessing, ViTConfig

from .head_counts import Signature, architecture, models_of, read_signature
from .keys import rename_keys, require
from .position_grid import infer_image_size
from .preprocessing import log_preprocessing, torchvision_weights_preprocessing

LAYER = r"^encoder\.layers\.encoder_layer_(\d+)\."
RULES = [
    (r"^class_token$", "cls_token"),
    (r"^conv_proj\.", "patch_embed.proj."),
    (r"^encoder\.pos_embedding$", "pos_embed.weight"),
    (LAYER + r"ln_1\.", r"blocks.\1.norm1."),
    (LAYER + r"self_attention\.in_proj_(weight|bias)$", r"blocks.\1.attn.qkv.\2"),
    (LAYER + r"self_attention\.out_proj\.", r"blocks.\1.attn.proj."),
    (LAYER + r"ln_2\.", r"blocks.\1.norm2."),
    (LAYER + r"mlp\.(0|linear_1)\.", r"blocks.\1.mlp.fc1."),  # linear_1: torchvision < 0.13
    (LAYER + r"mlp\.(3|linear_2)\.", r"blocks.\1.mlp.fc2."),
    (r"^encoder\.ln\.", "norm."),
    (r"^heads\.pre_logits\.", "pre_logits.0."),
    (r"^heads\.head\.", "head."),
]
# torchvision's ViT IMAGENET1K_V1 weights: ImageNet statistics, resize 256 then centre-crop 224, bilinear.
TORCHVISION_PREPROCESSING = Preprocessing(
    mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), crop_pct=0.875, interpolation="bilinear", crop_mode="center"
)


def is_torchvision_state_dict(state: Mapping[str, torch.Tensor]) -> bool:
    return "conv_proj.weight" in state and "encoder.pos_embedding" in state


def torchvision_signature(state: Mapping[str, torch.Tensor], source: str) -> Signature:
    return read_signature(rename_keys(state, RULES), "torchvision", source)


def convert_torchvision(
    state: Mapping[str, torch.Tensor], source: str, overrides: dict[str, Any]
) -> tuple[ViTConfig, dict[str, torch.Tensor]]:
    """torchvision state dict -> (vitlab config, vitlab state dict); consumes num_heads= and pretrained_tag=."""
    tag = overrides.pop("pretrained_tag", None)
    state = rename_keys(state, RULES)
    signature = read_signature(state, "torchvision", source)
    crop = None
    if tag is not None:
        preprocessing, crop = torchvision_weights_preprocessing(tag, models_of(signature), source)
        origin = f"torchvision's transforms of {tag}"
    else:
        preprocessing = dataclasses.replace(TORCHVISION_PREPROCESSING)
        origin = "assumed, torchvision's IMAGENET1K_V1 transforms: pass pretrained_tag= for other weights'"
    num_heads = overrides.pop("num_heads", None) or architecture(signature, source).num_heads
    num_positions = require(state, "pos_embed.weight", source).shape[1]
    patch = signature.patch_size
    config = ViTConfig(
        image_size=infer_image_size(num_positions - 1, patch, overrides.get("image_size"), source),
        patch_size=patch,
        in_channels=state["patch_embed.proj.weight"].shape[1],
        num_classes=state["head.weight"].shape[0] if "head.weight" in state else 0,
        dim=signature.dim,
        depth=signature.depth,
        num_heads=num_heads,
        mlp_dim=signature.mlp_dim,
        pool="token",
        representation_size=signature.representation_size,
        qkv_bias=signature.qkv_bias,
        act="gelu",
        norm_eps=1e-6,
        pos_resample="bicubic_aligned",
        pos_resample_antialias=False,
        preprocessing=preprocessing,
        name=Path(source).stem,
    )
    if crop is not None and config.image_size != (crop, crop):
        raise CheckpointError(
            f"{source}: pretrained_tag={tag!r} crops {crop} px; these weights are {config.image_size[0]} px"
        )
    if "preprocessing" not in overrides:  # else build_model names the given one
        log_preprocessing(source, preprocessing, origin)
    return config, state
