"""timm ResNetV2 / BiT state dicts (`resnetv2_50x1_bit`, ..., `resnetv2_152x4_bit`) as BiTResNet.

vitlab's BiT modules carry timm's names (model/resnet.py), so only the head differs: timm's is a
1x1 convolution (K, C, 1, 1), vitlab's a Linear (K, C). What the shapes do not show comes from
timm's definition of these models (resnetv2.py, _create_resnetv2_bit): pre-activation units,
StdConv2d with eps 1e-8, GroupNorm of 32 groups (eps 1e-5), the "fixed" stem (7x7/2 conv, zero
padding, 3x3/2 max-pool), and its default pretrained config: 224 px, mean = std = 0.5, bilinear,
crop 0.875. timm's other ResNetV2s (BatchNorm, deep stems, EvoNorm, FRN) are refused by name.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from vitlab.errors import CheckpointError
from vitlab.model import BiTConfig, Preprocessing
from vitlab.model.bit import bit_resnet_config

from .hybrid import count_units

log = logging.getLogger("vitlab")

UNIT = re.compile(r"^stages\.(\d+)\.blocks\.(\d+)\.")
BIT_NUM_GROUPS = 32
BIT_IMAGE_SIZE = 224
BIT_PREPROCESSING = Preprocessing(mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=0.875, interpolation="bilinear")
# (pattern on a key, what the model has that BiT has not)
NOT_BIT = [
    (r"running_mean$", "BatchNorm (timm's resnetv2_18/50/101/152)"),
    (r"^stem\.conv1\.", "a deep stem (stem.conv1-3, timm's resnetv2_*d / *t)"),
    (r"\.(v|tau)$", "EvoNorm or FilterResponseNorm (timm's resnetv2_50d_evos / _frn)"),
    (r"^stem\.norm\.", "units without pre-activation (stem.norm)"),
]


def is_timm_resnetv2_state_dict(state: Mapping[str, torch.Tensor]) -> bool:
    return any(UNIT.match(key) for key in state) and any(key.startswith("stem.conv") for key in state)


def convert_timm_resnetv2(
    state: Mapping[str, torch.Tensor], source: str, overrides: dict[str, Any]
) -> tuple[BiTConfig, dict[str, torch.Tensor]]:
    """timm ResNetV2 (BiT) state dict -> (BiTConfig, vitlab state dict)."""
    for pattern, what in NOT_BIT:
        keys = [key for key in state if re.search(pattern, key)]
        if keys:
            raise CheckpointError(f"{source}: a timm ResNetV2 with {what} is not BiT (key {keys[0]})")
    root = state["stem.conv.weight"]
    width, in_channels, kernel, _ = root.shape
    if kernel != 7:
        raise CheckpointError(f"{source}: a {kernel}x{kernel} root convolution; timm's BiT has a 7x7 one")
    state = dict(state)
    num_classes = 0
    if "head.fc.weight" in state:
        head = state.pop("head.fc.weight")
        if head.dim() != 4 or head.shape[-2:] != (1, 1):
            raise CheckpointError(f"{source}: head.fc.weight {tuple(head.shape)} is not a 1x1 convolution")
        state["head.weight"] = head.flatten(1)
        state["head.bias"] = state.pop("head.fc.bias")
        num_classes = head.shape[0]
    layers = count_units({(int(m[1]), int(m[2])) for key in state if (m := UNIT.match(key))}, 0, source)
    if "image_size" not in overrides:
        log.info(
            "%s: nominal image size %d, timm's default for its BiT models; pass image_size= for another",
            source,
            BIT_IMAGE_SIZE,
        )
    config = BiTConfig(
        resnet=bit_resnet_config(layers=layers, width=width, num_groups=BIT_NUM_GROUPS),
        image_size=(BIT_IMAGE_SIZE, BIT_IMAGE_SIZE),
        in_channels=in_channels,
        num_classes=num_classes,
        preprocessing=dataclasses.replace(BIT_PREPROCESSING),
        name=Path(source).stem,
    )
    return config, state
