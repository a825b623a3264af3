"""transformers' BitForImageClassification folders (model_type "bit") as BiTResNet: the folders
vitlab's hf export writes for a BiT ResNet, and transformers' own BiT with the same numerics.

transformers' Bit names vitlab's modules `bit.embedder.convolution` (the root conv), `bit.encoder.
stages.S.layers.U` (vitlab's stages.S.blocks.U), `bit.norm` and `classifier.1` (the head). The
numerics vitlab computes are those of a pre-activation trunk with symmetric padding, weight
standardisation (w - mean) / sqrt(var + 1e-8) and GroupNorm eps 1e-5; other layer types and
paddings are refused by name. The nominal image size is the image processor's output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vitlab.errors import CheckpointError
from vitlab.model import BiTConfig, BiTResNet
from vitlab.model.bit import bit_resnet_config

from .build import build_model
from .hf import PREPROCESSOR, class_names_from, hf_model_type, read_document, read_hf_weights
from .hf_processor import from_processor
from .keys import rename_keys
from .preprocessing import log_preprocessing

RULES = [
    (r"^bit\.embedder\.convolution\.", "stem.conv."),
    (r"^bit\.encoder\.stages\.(\d+)\.layers\.", r"stages.\1.blocks."),
    (r"^bit\.norm\.", "norm."),
    (r"^classifier\.1\.", "head."),
]
# config.json values the trunk must have for vitlab's BiT to compute transformers' numbers.
REQUIRED = {
    "layer_type": "preactivation",
    "global_padding": None,
    "embedding_dynamic_padding": False,
    "hidden_act": "relu",
}


def is_hf_bit_folder(directory: Path) -> bool:
    return hf_model_type(directory) == "bit"


def bit_config_from(document: dict[str, Any], directory: Path, num_classes: int) -> BiTConfig:
    source = str(directory / "config.json")
    wrong = [f"{key}={document.get(key)!r}" for key, value in REQUIRED.items() if document.get(key, value) != value]
    if wrong:
        raise CheckpointError(f"{source}: transformers' BiT with {', '.join(wrong)} is not a model vitlab computes")
    width = int(document.get("embedding_size", 64))
    factor = int(document.get("width_factor", 1))
    depths = tuple(int(d) for d in document.get("depths", (3, 4, 6, 3)))
    widths = [int(w) * factor for w in document.get("hidden_sizes", [256, 512, 1024, 2048])]
    if widths != [width * factor * 4 * 2**i for i in range(len(depths))]:
        raise CheckpointError(f"{source}: hidden_sizes {widths} are not BiT's 4 x {width * factor} x 2^stage")
    path = directory / PREPROCESSOR
    processor = read_document(path) if path.is_file() else {"image_processor_type": "BitImageProcessor"}
    preprocessing, image_size, origin = from_processor(processor, None, str(path))
    log_preprocessing(str(directory), preprocessing, origin)
    return BiTConfig(
        resnet=bit_resnet_config(layers=depths, width=width * factor, num_groups=int(document.get("num_groups", 32))),
        image_size=image_size,
        in_channels=int(document.get("num_channels", 3)),
        num_classes=num_classes,
        preprocessing=preprocessing,
        class_names=class_names_from(document.get("id2label"), num_classes),
        name=document.get("_name_or_path") or directory.name,
    )


def load_hf_bit(directory: str | Path, **overrides: Any) -> BiTResNet:
    directory = Path(directory)
    document = read_document(directory / "config.json")
    state: dict[str, torch.Tensor] = rename_keys(read_hf_weights(directory), RULES)
    num_classes = state["head.weight"].shape[0] if "head.weight" in state else 0
    config = bit_config_from(document, directory, num_classes)
    return build_model(config, state, str(directory), overrides)
