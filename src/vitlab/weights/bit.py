"""timm ResNetV2 / BiT state dicts (`resnetv2_50x1_bit`, ..., `resnetv2_152x4_bit`) as BiTResNet.

vitlab's BiT modules carry timm's names (model/resnet.py), so only the head differs: timm's is a
1x1 convolution (K, C, 1, 1), vitlab's a Linear (K, C). What the shapes do not show comes from
timm's definition of these models (resnetv2.py, _create_resnetv2_bit): pre-activation units,
StdConv2d with eps 1e-8, GroupNorm of 32 groups (eps 1e-5), the "fixed" stem (7x7/2 conv, zero
padding, 3x3/2 max-pool). Size and preprocessing come from timm's pretrained_cfg (a timm folder's,
or the tag's: pretrained_tag="resnetv2_50x1_bit.goog_in21k"), else timm's default for BiT: 224 px,
mean = std = 0.5, bilinear, crop 0.875, said in the log. timm's other ResNetV2s (BatchNorm, deep
stems, EvoNorm, FRN) are refused by name.
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
from vitlab.model.bit import bit_resnet_config, timm_bit_architecture

from .hybrid import count_units
from .preprocessing import from_timm_cfg, log_preprocessing
from .timm import TimmRecord, record_for_tag, recorded_image_size

log = logging.getLogger("vitlab")

UNIT = re.compile(r"^stages\.(\d+)\.blocks\.(\d+)\.")
BIT_NUM_GROUPS = 32
BIT_IMAGE_SIZE = 224
BIT_PREPROCESSING = Preprocessing(
    mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=0.875, interpolation="bilinear", crop_mode="center"
)
# (pattern on a key, what the model has that BiT has not)
NOT_BIT = [
    (r"running_mean$", "BatchNorm (timm's resnetv2_18/50/101/152)"),
    (r"^stem\.conv1\.", "a deep stem (stem.conv1-3, timm's resnetv2_*d / *t)"),
    (r"\.(v|tau)$", "EvoNorm or FilterResponseNorm (timm's resnetv2_50d_evos / _frn)"),
    (r"^stem\.norm\.", "units without pre-activation (stem.norm)"),
]


def is_timm_resnetv2_state_dict(state: Mapping[str, torch.Tensor]) -> bool:
    """timm's stage/block keys; whether the units are ResNetV2 bottlenecks is checked by the reader,
    which names the model when they are not (DaViT, MetaFormer, ... share the stage/block layout)."""
    return any(UNIT.match(key) for key in state) and any(key.startswith("stem.") for key in state)


def convert_timm_resnetv2(
    state: Mapping[str, torch.Tensor], source: str, overrides: dict[str, Any], record: TimmRecord | None = None
) -> tuple[BiTConfig, dict[str, torch.Tensor]]:
    """timm ResNetV2 (BiT) state dict -> (BiTConfig, vitlab state dict); consumes pretrained_tag=."""
    check_timm_bit(state, source)
    root = state["stem.conv.weight"]
    width, in_channels, kernel, _ = root.shape
    if kernel != 7:
        raise CheckpointError(f"{source}: a {kernel}x{kernel} root convolution; timm's BiT has a 7x7 one")
    state = dict(state)
    num_classes = move_timm_bit_head(state, source)
    layers = count_units({(int(m[1]), int(m[2])) for key in state if (m := UNIT.match(key))}, 0, source)
    record = record or TimmRecord()
    tag = overrides.pop("pretrained_tag", None)
    if tag is not None:
        name = timm_bit_architecture(bit_resnet_config(layers=layers, width=width, num_groups=BIT_NUM_GROUPS))
        record = record_for_tag(tag, [name] if name else [], record, source)
    image_size = recorded_image_size(record)
    if image_size is None and "image_size" not in overrides:
        log.info(
            "%s: nominal image size %d, timm's default for its BiT models; pass image_size= for another",
            source,
            BIT_IMAGE_SIZE,
        )
    preprocessing, origin = timm_bit_preprocessing(record, source)
    names = record.label_names or None
    if names is not None and len(names) != num_classes:
        raise CheckpointError(f"{source}: label_names lists {len(names)} names for a head of {num_classes} classes")
    config = BiTConfig(
        resnet=bit_resnet_config(layers=layers, width=width, num_groups=BIT_NUM_GROUPS),
        image_size=image_size or (BIT_IMAGE_SIZE, BIT_IMAGE_SIZE),
        in_channels=in_channels,
        num_classes=num_classes,
        head_dropout=float(record.model_args.get("drop_rate", 0.0)),
        preprocessing=preprocessing,
        class_names=names,
        name=record.architecture or Path(source).stem,
    )
    if "preprocessing" not in overrides:  # else build_model names the given one
        log_preprocessing(source, preprocessing, origin)
    return config, state


def check_timm_bit(state: Mapping[str, torch.Tensor], source: str) -> None:
    """CheckpointError unless the keys are a ResNetV2 of BiT's bottleneck units, since timm's other
    stage/block models share the key layout but not the network."""
    if not any(key.startswith("stages.0.blocks.0.conv1.") for key in state):
        first = sorted(key for key in state if UNIT.match(key))[0]
        raise CheckpointError(
            f"{source}: timm stage/block keys without ResNetV2 bottleneck units ({first}): a timm model vitlab does "
            "not hold (DaViT, MetaFormer, ConvNeXt, ...)"
        )
    for pattern, what in NOT_BIT:
        keys = [key for key in state if re.search(pattern, key)]
        if keys:
            raise CheckpointError(f"{source}: a timm ResNetV2 with {what} is not BiT (key {keys[0]})")


def move_timm_bit_head(state: dict[str, torch.Tensor], source: str) -> int:
    """Rename timm's 1x1-convolution head (head.fc) in place to vitlab's linear head, because BiTResNet
    classifies with a Linear; returns its class count (0 without a head)."""
    if "head.fc.weight" not in state:
        return 0
    head = state.pop("head.fc.weight")
    if head.dim() != 4 or head.shape[-2:] != (1, 1):
        raise CheckpointError(f"{source}: head.fc.weight {tuple(head.shape)} is not a 1x1 convolution")
    state["head.weight"] = head.flatten(1)
    state["head.bias"] = state.pop("head.fc.bias")
    return head.shape[0]


def timm_bit_preprocessing(record: TimmRecord, source: str) -> tuple[Preprocessing, str]:
    """The weights' preprocessing and where it came from: their pretrained_cfg when timm recorded one,
    else timm's BiT default, said to be assumed so that the log never hides a guess."""
    if record.pretrained_cfg is not None:
        return from_timm_cfg(record.pretrained_cfg, source), record.origin
    return (
        dataclasses.replace(BIT_PREPROCESSING),
        "assumed, timm's BiT default: pass pretrained_tag= for the weights' own",
    )
