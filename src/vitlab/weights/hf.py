"""Hugging Face transformers ViT folders: config.json + model.safetensors / pytorch_model.bin.

Covers ViTModel (its pooler, Dense + tanh on the class token, is the paper's representation
layer) and ViTForImageClassification (`vit.` prefix, `classifier` head). Numerics come from the
folder's config: hidden_act (exact GELU by default), layer_norm_eps (1e-12 by default), qkv_bias;
E_pos is resampled as HF's interpolate_pos_encoding does (bicubic, no antialiasing).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vitlab.errors import CheckpointError
from vitlab.model import ConfigError, Preprocessing, VisionTransformer, ViTConfig
from vitlab.model.config import Activation, as_pair
from vitlab.textfiles import TextFileError, read_json

from .build import build_model
from .files import read_state_dict
from .hf_processor import from_processor
from .keys import rename_keys
from .preprocessing import log_preprocessing

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PICKLE = "pytorch_model.bin"
PREPROCESSOR = "preprocessor_config.json"

# transformers' ACT2FN names of exact and tanh GELU (activations.py): gelu_python is erf GELU in
# Python, gelu_accurate the tanh formula written out, gelu_new / gelu_fast / gelu_pytorch_tanh tanh GELU.
ACTIVATIONS: dict[str, Activation] = {
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_accurate": "gelu_tanh",
    "quick_gelu": "quick_gelu",  # x sigmoid(1.702 x), CLIP's
}

LAYER = r"^(?:encoder\.layer|layers)\.(\d+)\."  # checkpoints on disk; transformers >= 5 in memory
RULES = [
    (r"^embeddings\.cls_token$", "cls_token"),
    (r"^embeddings\.position_embeddings$", "pos_embed.weight"),
    (r"^embeddings\.patch_embeddings\.projection\.", "patch_embed.proj."),
    (LAYER + r"layernorm_before\.", r"blocks.\1.norm1."),
    (LAYER + r"attention\.attention\.(query|key|value)\.", r"blocks.\1.attn.\2."),
    (LAYER + r"attention\.q_proj\.", r"blocks.\1.attn.query."),
    (LAYER + r"attention\.k_proj\.", r"blocks.\1.attn.key."),
    (LAYER + r"attention\.v_proj\.", r"blocks.\1.attn.value."),
    (LAYER + r"attention\.(?:output\.dense|o_proj)\.", r"blocks.\1.attn.proj."),
    (LAYER + r"layernorm_after\.", r"blocks.\1.norm2."),
    (LAYER + r"(?:intermediate\.dense|mlp\.fc1)\.", r"blocks.\1.mlp.fc1."),
    (LAYER + r"(?:output\.dense|mlp\.fc2)\.", r"blocks.\1.mlp.fc2."),
    (r"^layernorm\.", "norm."),
    (r"^pooler\.dense\.", "pre_logits.0."),
    (r"^classifier\.", "head."),
]
PROJECTIONS = ("query", "key", "value")


def hf_model_type(directory: Path) -> str | None:
    """The model_type of a transformers folder's config.json (None if it has none)."""
    try:
        document = read_json(directory / "config.json")
    except (OSError, ValueError):
        return None
    return document.get("model_type") if isinstance(document, dict) else None


def is_hf_vit_folder(directory: Path) -> bool:
    return hf_model_type(directory) == "vit"


def read_document(path: Path) -> dict[str, Any]:
    """A JSON object of the folder, bounded in size and nesting (vitlab.textfiles)."""
    try:
        document = read_json(path)
    except TextFileError as error:
        raise CheckpointError(str(error)) from None
    if not isinstance(document, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(document).__name__}")
    return document


def read_hf_weights(directory: Path) -> dict[str, torch.Tensor]:
    if (directory / SAFETENSORS).is_file():
        return read_state_dict(directory / SAFETENSORS)
    if (directory / SAFETENSORS_INDEX).is_file():  # sharded: {"weight_map": {key: file}}
        shards = sorted(set(read_document(directory / SAFETENSORS_INDEX)["weight_map"].values()))
        return {k: v for shard in shards for k, v in read_state_dict(directory / shard).items()}
    if (directory / PICKLE).is_file():
        return read_state_dict(directory / PICKLE)
    raise CheckpointError(f"{directory}: an HF folder needs {SAFETENSORS}, {SAFETENSORS_INDEX} or {PICKLE}")


def fuse_qkv(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """HF keeps query, key and value as three Linear layers; vitlab stacks them as one (3*inner, D).

    Only the layers the file holds are visited: `depth` comes from config.json, which may say anything."""
    present = {int(key.split(".")[1]) for key in state if key.startswith("blocks.") and key.split(".")[1].isdigit()}
    for index in sorted(present):
        for suffix in ("weight", "bias"):
            keys = [f"blocks.{index}.attn.{name}.{suffix}" for name in PROJECTIONS]
            if all(key in state for key in keys):  # otherwise the strict load names what is there
                state[f"blocks.{index}.attn.qkv.{suffix}"] = torch.cat([state.pop(key) for key in keys])
    return state


def read_preprocessing(directory: Path, image_size: tuple[int, int]) -> Preprocessing:
    """The preprocessing of the folder's preprocessor_config.json (hf_processor.py); without one,
    ViTImageProcessor's defaults, said in the log."""
    path = directory / PREPROCESSOR
    document = read_document(path) if path.is_file() else {}
    preprocessing, _, origin = from_processor(document, image_size, str(path))
    if not document:
        origin = f"assumed, ViTImageProcessor's defaults: the folder has no {PREPROCESSOR}"
    log_preprocessing(str(directory), preprocessing, origin)
    return preprocessing


def class_names_from(id2label: dict[Any, str] | None, num_classes: int) -> list[str] | None:
    """id2label in index order; HF's placeholder names ("LABEL_3") are no names at all."""
    if not id2label or num_classes == 0:
        return None
    names = [id2label.get(i, id2label.get(str(i))) for i in range(num_classes)]
    if any(name is None for name in names) or names == [f"LABEL_{i}" for i in range(num_classes)]:
        return None
    return [str(name) for name in names]


def convert_hf(
    document: dict[str, Any], state: dict[str, torch.Tensor], directory: Path
) -> tuple[ViTConfig, dict[str, torch.Tensor]]:
    source = str(directory)
    act = document.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise CheckpointError(f"{source}: hidden_act {act!r} is not one vitlab has (known: {', '.join(ACTIVATIONS)})")
    if document.get("pooler_act", "tanh") != "tanh" and any(k.startswith(("pooler.", "vit.pooler.")) for k in state):
        raise CheckpointError(f"{source}: pooler_act {document['pooler_act']!r}; the representation layer is tanh")
    if any(key.startswith("vit.") for key in state):
        state = {key.removeprefix("vit."): value for key, value in state.items()}
    depth = document.get("num_hidden_layers", 12)
    state = fuse_qkv(rename_keys(state, RULES))
    num_classes = state["head.weight"].shape[0] if "head.weight" in state else 0
    image_size = as_pair(document.get("image_size", 224))
    config = ViTConfig(
        image_size=image_size,
        patch_size=document.get("patch_size", 16),
        in_channels=document.get("num_channels", 3),
        num_classes=num_classes,
        dim=document.get("hidden_size", 768),
        depth=depth,
        num_heads=document.get("num_attention_heads", 12),
        mlp_dim=document.get("intermediate_size", 3072),
        pool="token",
        representation_size=state["pre_logits.0.weight"].shape[0] if "pre_logits.0.weight" in state else None,
        qkv_bias=document.get("qkv_bias", True),
        dropout=document.get("hidden_dropout_prob", 0.0),
        attn_dropout=document.get("attention_probs_dropout_prob", 0.0),
        act=ACTIVATIONS[act],
        norm_eps=document.get("layer_norm_eps", 1e-12),
        pos_resample="bicubic",
        pos_resample_antialias=False,
        preprocessing=read_preprocessing(directory, image_size),
        class_names=class_names_from(document.get("id2label"), num_classes),
        name=document.get("_name_or_path") or directory.name,
    )
    return config, state


def load_hf(directory: str | Path, **overrides: Any) -> VisionTransformer:
    directory = Path(directory)
    document = read_document(directory / "config.json")
    try:
        config, state = convert_hf(document, read_hf_weights(directory), directory)
    except ConfigError as error:
        raise CheckpointError(f"{directory / 'config.json'}: {error}") from None
    return build_model(config, state, str(directory), overrides)
