"""Writing a folder timm loads: `timm.create_model("local-dir:DIR", pretrained=True)`.

The layout is the one timm's own hub writer produces (timm/models/_hub.py, save_for_hf):
config.json with "architecture", "num_classes", "num_features", "global_pool", "label_names",
"model_args" (the keyword arguments that rebuild this exact model, which take precedence over the
architecture's defaults) and "pretrained_cfg" (input size, mean, std, crop, interpolation), beside
model.safetensors holding timm's state dict. timm's key names are vitlab's but for E_pos.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from vitlab.model import BiTResNet, ConfigError, VisionTransformer, ViTConfig
from vitlab.model.aliases import TIMM_POOL, timm_architecture
from vitlab.model.bit import timm_bit_architecture

from .build import check_matches_config
from .peers import TIMM, TIMM_HYBRID_BACKBONES, check_peer

log = logging.getLogger("vitlab")

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
# Any registered ViT works as the architecture, since model_args give every size; the matching
# name is used where timm has one.
GENERIC_ARCHITECTURE = "vit_base_patch16_224"
# A distillation token and its head are timm's VisionTransformerDistilled (timm/models/deit.py), which
# every deit_*_distilled_* entry builds; model_args give the sizes.
DISTILLED_ARCHITECTURE = "deit_base_distilled_patch16_224"
# config.json cannot name an MLP class either: a gated MLP is that of DINOv2-giant (SwiGLUPacked), whose
# fc1 gives mlp_ratio x width features, the gate and the value.
GATED_ARCHITECTURE = "vit_giant_patch14_dinov2"


def architecture_for(config: ViTConfig) -> str:
    """The timm entry point config.json names: the one whose classes (hybrid backbone, DeiT's distilled
    model, the gated MLP) the model needs, as model_args cannot name a class; else the matching name."""
    if config.gated_mlp and (config.backbone is not None or config.distillation_token):
        raise ConfigError(
            "--format timm: timm holds a gated (SwiGLU) MLP in its DINOv2-giant architecture, which has no "
            "ResNet backbone and no distillation token"
        )
    if config.backbone is not None:  # timm's hybrid function builds the backbone, model_args the rest
        return TIMM_HYBRID_BACKBONES[config.backbone.layers]
    if config.distillation_token:
        return DISTILLED_ARCHITECTURE
    if config.gated_mlp:
        return GATED_ARCHITECTURE
    return timm_architecture(config) or GENERIC_ARCHITECTURE


def timm_config(model: VisionTransformer) -> dict[str, Any]:
    """config.json for timm; raises ConfigError for what timm cannot hold."""
    config = check_peer(model, TIMM)
    architecture = architecture_for(config)
    height, width = config.image_size
    model_args: dict[str, Any] = dict(
        img_size=[height, width],
        patch_size=config.patch_size,
        in_chans=config.in_channels,
        embed_dim=config.dim,
        depth=config.depth,
        num_heads=config.num_heads,
        mlp_ratio=(2 if config.gated_mlp else 1) * config.mlp_dim / config.dim,  # fc1's width over D
        qkv_bias=config.qkv_bias,
        class_token=config.has_class_token,
        global_pool=TIMM_POOL[config.pool],
        # vit_jax's GAP normalises every token before the mean; timm's default for 'avg' normalises after.
        fc_norm=config.norm_after_pool,
        pos_embed="learn" if config.pos_embed == "learned" else "none",
        no_embed_class=False,  # E_pos covers the class token and the registers, as vitlab's table
        reg_tokens=config.register_tokens,
        act_layer=config.act,  # timm's names: 'gelu' (exact) and 'gelu_tanh'
        drop_rate=config.head_dropout,
        pos_drop_rate=config.dropout if config.embed_dropout else 0.0,
        proj_drop_rate=config.dropout,
        attn_drop_rate=config.attn_dropout,
        drop_path_rate=config.drop_path,
        init_values=config.init_values,
        qk_norm=config.qk_norm,
        pre_norm=config.pre_norm,
    )
    if (config.pos_resample, config.pos_resample_antialias) != ("bicubic", True) and config.pos_embed == "learned":
        log.info(
            "timm export: timm resamples E_pos bicubic with antialiasing at other sizes; this model resamples "
            "%s (antialias %s): same logits at %dx%d, not at other sizes",
            config.pos_resample,
            config.pos_resample_antialias,
            height,
            width,
        )
    # The model's own timm record (model/timm_api.py) minus what config.json keeps at its root.
    pretrained_cfg = {k: v for k, v in model.pretrained_cfg.items() if k not in ("architecture", "label_names")}
    pretrained_cfg.update(tag="vitlab", custom_load=False, pool_size=None)
    document: dict[str, Any] = {
        "architecture": architecture,
        "num_classes": config.num_classes,
        "num_features": config.dim,
        "global_pool": TIMM_POOL[config.pool],
    }
    if config.class_names:
        document["label_names"] = list(config.class_names)
    document["model_args"] = model_args
    document["pretrained_cfg"] = pretrained_cfg
    return document


def timm_state_dict(model: VisionTransformer) -> dict[str, torch.Tensor]:
    state = {name: t.detach().to("cpu", torch.float32).contiguous() for name, t in model.state_dict().items()}
    if "pos_embed.weight" in state:
        state["pos_embed"] = state.pop("pos_embed.weight")  # timm's E_pos is a bare parameter
    backbone = model.config.backbone
    if backbone is not None and not backbone.layers:
        stem = "patch_embed.backbone.stem."
        state = {("patch_embed.backbone." + k[len(stem) :] if k.startswith(stem) else k): v for k, v in state.items()}
    return state


def timm_bit_config(model: BiTResNet) -> dict[str, Any]:
    """config.json for timm's resnetv2_{depth}x{width}_bit of the same trunk and numerics."""
    config = model.config
    architecture = timm_bit_architecture(config.resnet)
    if architecture is None:
        raise ConfigError(
            f"--format timm: timm cannot hold this BiT ResNet ({config.resnet}); its BiT models are ResNet-50, "
            "101 and 152 of width 64k with timm's numerics"
        )
    document: dict[str, Any] = {
        "architecture": architecture,
        "num_classes": config.num_classes,
        "num_features": config.feature_dim,
        "global_pool": "avg",
    }
    if config.class_names:
        document["label_names"] = list(config.class_names)
    document["model_args"] = dict(in_chans=config.in_channels, drop_rate=config.head_dropout)
    cfg = {k: v for k, v in model.pretrained_cfg.items() if k not in ("architecture", "label_names")}
    document["pretrained_cfg"] = {**cfg, "tag": "vitlab", "custom_load": False, "classifier": "head.fc"}
    return document


def timm_bit_state_dict(model: BiTResNet) -> dict[str, torch.Tensor]:
    """timm's names are vitlab's but for the head, a 1x1 convolution `head.fc` (K, C, 1, 1)."""
    state = {name: t.detach().to("cpu", torch.float32).contiguous() for name, t in model.state_dict().items()}
    if "head.weight" in state:
        state["head.fc.weight"] = state.pop("head.weight")[:, :, None, None].contiguous()
        state["head.fc.bias"] = state.pop("head.bias")
    return state


def save_timm(model: VisionTransformer | BiTResNet, directory: str | Path) -> Path:
    """Write config.json + model.safetensors for timm; nothing is written if timm cannot hold the model."""
    if isinstance(model, BiTResNet):
        document, state = timm_bit_config(model), timm_bit_state_dict(model)
    else:
        document, state = timm_config(model), timm_state_dict(model)
    check_matches_config(model, f"--format timm: {directory}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(state, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    (directory / CONFIG_FILE).write_text(json.dumps(document, indent=2) + "\n")
    return directory
