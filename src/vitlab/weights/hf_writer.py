"""Writing a folder transformers loads: `ViTForImageClassification.from_pretrained(DIR)` and
`pipeline("image-classification", model=DIR)`; a BiT ResNet as its BitForImageClassification.

config.json (model_type "vit"), model.safetensors in transformers' on-disk key names (the ones
its own save_pretrained writes: vit.encoder.layer.N.attention.attention.query, ...) and
preprocessor_config.json for the image processor that resizes and crops as vitlab's evaluation does
(hf_processor.py).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from vitlab.model import BiTResNet, ConfigError, VisionTransformer

from .build import check_matches_config
from .hf_processor import to_processor
from .peers import HF, check_peer

log = logging.getLogger("vitlab")

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
PREPROCESSOR_FILE = "preprocessor_config.json"
HIDDEN_ACT = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "quick_gelu": "quick_gelu"}

LAYER = "vit.encoder.layer.{i}."
BLOCK_KEYS = {  # vitlab module in block i -> transformers module in layer i
    "norm1": "layernorm_before",
    "attn.proj": "attention.output.dense",
    "norm2": "layernorm_after",
    "mlp.fc1": "intermediate.dense",
    "mlp.fc2": "output.dense",
}
TOP_KEYS = {
    "cls_token": "vit.embeddings.cls_token",
    "pos_embed.weight": "vit.embeddings.position_embeddings",
    "patch_embed.proj.weight": "vit.embeddings.patch_embeddings.projection.weight",
    "patch_embed.proj.bias": "vit.embeddings.patch_embeddings.projection.bias",
    "norm.weight": "vit.layernorm.weight",
    "norm.bias": "vit.layernorm.bias",
    "head.weight": "classifier.weight",
    "head.bias": "classifier.bias",
}


def labels_and_dtype(names: list[str]) -> dict[str, Any]:
    """The class names as transformers' configs hold them, and the weights' dtype."""
    return {
        "id2label": {str(i): name for i, name in enumerate(names)},
        "label2id": {name: i for i, name in enumerate(names)},
        "dtype": "float32",
    }


def hf_config(model: VisionTransformer) -> dict[str, Any]:
    """config.json for ViTForImageClassification; raises ConfigError for what it cannot hold."""
    config = check_peer(model, HF)
    height, width = config.image_size
    if (config.pos_resample, config.pos_resample_antialias) != ("bicubic", False):
        log.info(
            "hf export: transformers resamples E_pos bicubic without antialiasing (interpolate_pos_encoding); this "
            "model resamples %s (antialias %s): same logits at %dx%d, not at other sizes",
            config.pos_resample,
            config.pos_resample_antialias,
            height,
            width,
        )
    names = config.class_names or [f"LABEL_{i}" for i in range(config.num_classes)]  # transformers' placeholders
    return {
        "architectures": ["ViTForImageClassification"],
        "model_type": "vit",
        "hidden_size": config.dim,
        "num_hidden_layers": config.depth,
        "num_attention_heads": config.num_heads,
        "intermediate_size": config.mlp_dim,
        "hidden_act": HIDDEN_ACT[config.act],
        "hidden_dropout_prob": config.dropout,
        "attention_probs_dropout_prob": config.attn_dropout,
        "initializer_range": 0.02,
        "layer_norm_eps": config.norm_eps,
        "image_size": height if height == width else [height, width],
        "patch_size": config.patch_size,
        "num_channels": config.in_channels,
        "qkv_bias": config.qkv_bias,
        "encoder_stride": config.patch_size,
        **labels_and_dtype(names),
    }


def hf_preprocessor(model: VisionTransformer | BiTResNet) -> dict[str, Any]:
    """preprocessor_config.json: the processor that prepares images as vitlab's eval transform."""
    return to_processor(model.config.preprocessing, model.config.image_size)


def hf_state_dict(model: VisionTransformer) -> dict[str, torch.Tensor]:
    """vitlab's state dict in transformers' names; the fused qkv is split into query, key, value."""
    state = {name: t.detach().to("cpu", torch.float32) for name, t in model.state_dict().items()}
    out: dict[str, torch.Tensor] = {}
    for index in range(model.config.depth):
        block, layer = f"blocks.{index}.", LAYER.format(i=index)
        for suffix in ("weight", "bias"):
            fused = state.pop(f"{block}attn.qkv.{suffix}", None)
            if fused is not None:  # (3 * inner, D): q, k, v stacked, as hf.py's fuse_qkv reads them back
                for name, part in zip(("query", "key", "value"), fused.chunk(3, dim=0)):
                    out[f"{layer}attention.attention.{name}.{suffix}"] = part
            for ours, theirs in BLOCK_KEYS.items():
                out[f"{layer}{theirs}.{suffix}"] = state.pop(f"{block}{ours}.{suffix}")
    for ours, theirs in TOP_KEYS.items():
        if ours in state:
            out[theirs] = state.pop(ours)
    if state:  # check_peer lets through only what has a place; this guards the table above
        raise AssertionError(f"hf export: no transformers name for {', '.join(sorted(state))}")
    return {name: tensor.contiguous() for name, tensor in out.items()}


# -- BiT: transformers' BitForImageClassification (pre-activation ResNetV2, as vitlab's BiT) -------
BIT_NUMERICS = dict(
    preact=True,
    stem="standard",
    padding="symmetric",
    num_groups=32,
    norm_eps=1e-5,
    weight_std="timm",
    weight_std_eps=1e-8,
)


def hf_bit_config(model: BiTResNet) -> dict[str, Any]:
    """config.json for BitForImageClassification; ConfigError for a trunk it does not build."""
    config = model.config
    resnet = config.resnet
    wrong = [f"{k}={getattr(resnet, k)!r}" for k, v in BIT_NUMERICS.items() if getattr(resnet, k) != v]
    if wrong:  # transformers' Bit: symmetric padding, (w - mean) / sqrt(var + 1e-8), GroupNorm eps 1e-5
        raise ConfigError(f"--format hf: transformers' BiT cannot hold {', '.join(wrong)}")
    names = config.class_names or [f"LABEL_{i}" for i in range(config.num_classes)]
    widths = [resnet.width * 4 * 2**i for i in range(len(resnet.layers))]
    return {
        "architectures": ["BitForImageClassification"],
        "model_type": "bit",
        "layer_type": "preactivation",
        "num_channels": config.in_channels,
        "embedding_size": resnet.width,
        # the widths already include BiT's width factor, so transformers' own factor stays 1
        "hidden_sizes": widths,
        "width_factor": 1,
        "depths": list(resnet.layers),
        "num_groups": resnet.num_groups,
        "hidden_act": "relu",
        "global_padding": None,
        "embedding_dynamic_padding": False,
        "out_features": [f"stage{len(widths)}"],
        **labels_and_dtype(names),
    }


def hf_bit_state_dict(model: BiTResNet) -> dict[str, torch.Tensor]:
    out = {}
    for name, tensor in model.state_dict().items():
        tensor = tensor.detach().to("cpu", torch.float32).contiguous()
        if name.startswith("stem.conv."):
            name = "bit.embedder.convolution." + name.removeprefix("stem.conv.")
        elif name.startswith("stages."):
            name = "bit.encoder." + name.replace(".blocks.", ".layers.", 1)
        elif name.startswith("norm."):
            name = "bit." + name
        elif name.startswith("head."):
            name = "classifier.1." + name.removeprefix("head.")
        out[name] = tensor
    return out


def save_hf(model: VisionTransformer | BiTResNet, directory: str | Path) -> Path:
    """Write config.json, model.safetensors and preprocessor_config.json; nothing if HF cannot hold the model."""
    if isinstance(model, BiTResNet):
        document, preprocessor, state = hf_bit_config(model), hf_preprocessor(model), hf_bit_state_dict(model)
    else:
        document, preprocessor, state = hf_config(model), hf_preprocessor(model), hf_state_dict(model)
    check_matches_config(model, f"--format hf: {directory}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(state, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    (directory / CONFIG_FILE).write_text(json.dumps(document, indent=2) + "\n")
    (directory / PREPROCESSOR_FILE).write_text(json.dumps(preprocessor, indent=2) + "\n")
    return directory
