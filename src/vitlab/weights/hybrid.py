"""Hybrid (ResNet + ViT) checkpoints: the official R50+ViT-B/16 `.npz` layout and timm's
`vit_base_r50_s16_*` state dicts, with the backbone's architecture read off the weights.

Official layout (vit_jax models_vit.py / models_resnet.py) beside the ViT's own keys:
    conv_root/kernel (7, 7, C, width), gn_root/{scale, bias}
    block{i}/unit{j}/{conv1, conv2, conv3, conv_proj}/kernel, .../{gn1, gn2, gn3, gn_proj}/{scale, bias}
Kernels are HWIO; released files store GroupNorm parameters as (1, 1, 1, C), newer ones as (C,).
The transformer part is read and written by npz.py: on the feature map it is a plain ViT.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitlab.errors import CheckpointError, RefusedFileError
from vitlab.memory.budget import check_memory
from vitlab.model import ResNetConfig, VisionTransformer, ViTConfig
from vitlab.model.config import as_pair
from vitlab.model.resnet import StemKind
from vitlab.npy_files import npz_names

from .build import build_model
from .keys import rename_keys
from .npz import CONV, PREFIXES, FlaxParams, export_npz, infer_config, read_arrays, say_preprocessing, to_state_dict

log = logging.getLogger("vitlab")

BACKBONE = "patch_embed.backbone."
NPZ_BACKBONE_KEY = re.compile(r"(conv_root|gn_root|block\d+/unit\d+)/")
NPZ_UNIT = re.compile(r"block(\d+)/unit(\d+)/")
TIMM_UNIT = re.compile(re.escape(BACKBONE) + r"stages\.(\d+)\.blocks\.(\d+)\.")
STEMS: dict[int, StemKind] = {7: "standard", 3: "small"}  # root kernel size -> ResNetConfig.stem


def vit_jax_backbone(layers: tuple[int, ...], width: int, stem: StemKind) -> ResNetConfig:
    """vit_jax's numerics: SAME padding, (w - mean) / (std + 1e-5), GroupNorm(32, eps 1e-6)."""
    return ResNetConfig(layers=layers, width=width, stem=stem)


def timm_backbone(layers: tuple[int, ...], width: int, stem: StemKind) -> ResNetConfig:
    """timm's _resnetv2 for hybrids: StdConv2dSame(eps=1e-8) on the variance, GroupNormAct eps 1e-5."""
    return ResNetConfig(layers=layers, width=width, stem=stem, norm_eps=1e-5, weight_std="timm", weight_std_eps=1e-8)


def count_units(found: set[tuple[int, int]], first: int, source: str) -> tuple[int, ...]:
    """Units per stage from the (stage, unit) pairs present; both must be numbered without gaps."""
    layers = []
    for stage in range(first, first + len({s for s, _ in found})):
        units = sorted(u for s, u in found if s == stage)
        if not units or units != list(range(first, first + len(units))):
            raise CheckpointError(
                f"{source}: backbone stage {stage} has units {units}; expected them numbered from {first}"
            )
        layers.append(len(units))
    return tuple(layers)


def stem_of(kernel_size: int, source: str) -> StemKind:
    if kernel_size not in STEMS:
        raise CheckpointError(f"{source}: a {kernel_size}x{kernel_size} root convolution is neither stem {STEMS}")
    return STEMS[kernel_size]


def backbone_table(config: ResNetConfig) -> list[tuple[str, str, str]]:
    """(official name, vitlab module, "conv" | "norm") of every backbone layer."""
    rows = [("conv_root", "stem.conv", "conv"), ("gn_root", "stem.norm", "norm")]
    for stage, num_units in enumerate(config.layers):
        for unit in range(num_units):
            flax, torch_ = f"block{stage + 1}/unit{unit + 1}/", f"stages.{stage}.blocks.{unit}."
            for r in (1, 2, 3):
                rows += [(f"{flax}conv{r}", f"{torch_}conv{r}", "conv"), (f"{flax}gn{r}", f"{torch_}norm{r}", "norm")]
            if unit == 0:  # a stage's first unit projects its shortcut
                rows += [
                    (f"{flax}conv_proj", f"{torch_}downsample.conv", "conv"),
                    (f"{flax}gn_proj", f"{torch_}downsample.norm", "norm"),
                ]
    return rows


# -- official .npz ---------------------------------------------------------------------------------
def is_hybrid_npz(path: str | Path) -> bool:
    try:
        return any(key.endswith("conv_root/kernel") for key in npz_names(path))
    except (RefusedFileError, OSError):
        return False  # npz.py reports what is wrong with the file


def backbone_state_from_npz(
    arrays: Mapping[str, np.ndarray], prefix: str, config: ResNetConfig, source: str
) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    conv_to_torch = CONV[0]
    for flax, module, kind in backbone_table(config):
        pairs = [("kernel", "weight")] if kind == "conv" else [("scale", "weight"), ("bias", "bias")]
        for flax_param, torch_param in pairs:
            key = f"{prefix}{flax}/{flax_param}"
            if key not in arrays:
                raise CheckpointError(f"{source}: missing backbone parameter {key}")
            used.add(key)
            value = conv_to_torch(arrays[key]) if kind == "conv" else arrays[key].reshape(-1)  # (1,1,1,C) or (C,)
            state[f"{BACKBONE}{module}.{torch_param}"] = torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
    unused = sorted(k for k in arrays if NPZ_BACKBONE_KEY.match(k[len(prefix) :]) and k not in used)
    if unused:
        raise CheckpointError(f"{source}: backbone parameters vitlab's ResNet has no place for: {', '.join(unused)}")
    return state


def load_hybrid_npz(path: str | Path, **overrides: Any) -> VisionTransformer:
    """An official hybrid .npz (R50+ViT-B/16 and the AugReg R+ViT files), architecture inferred."""
    path = Path(path)
    source = str(path)
    arrays = read_arrays(path, overrides.get("memory_limit"))
    prefix = next((p for p in PREFIXES if f"{p}conv_root/kernel" in arrays), None)
    if prefix is None:
        raise CheckpointError(f"{source}: no conv_root/kernel; not a hybrid ResNet + ViT .npz")
    size, _, in_channels, width = arrays[prefix + "conv_root/kernel"].shape
    units = {(int(m[1]), int(m[2])) for key in arrays if (m := NPZ_UNIT.match(key[len(prefix) :]))}
    backbone = vit_jax_backbone(count_units(units, 1, source), width, stem_of(size, source))

    # The transformer reads the feature map: a plain ViT whose "image" is image / stride.
    transformer = {k: v for k, v in arrays.items() if not NPZ_BACKBONE_KEY.match(k[len(prefix) :])}
    params = FlaxParams(transformer, source)
    names = params.block_names()
    hint = overrides.get("image_size")
    feature_hint = tuple(side // backbone.stride for side in as_pair(hint)) if hint is not None else None
    on_features = infer_config(params, names, feature_hint, path.stem)
    say_preprocessing(on_features, source, overrides)
    config = on_features.replace(
        backbone=backbone,
        in_channels=in_channels,
        image_size=tuple(side * backbone.stride for side in on_features.image_size),
    )
    check_memory(config, limit=overrides.get("memory_limit"), source=source)  # before loops over its depth
    state = to_state_dict(params, names, config.depth, on_features.num_patches)
    state.update(backbone_state_from_npz(arrays, prefix, backbone, source))
    return build_model(config, state, source, overrides)


def export_hybrid_npz(model: VisionTransformer, path: str | Path) -> Path:
    """Write a hybrid in the official layout (GroupNorm parameters as the released (1, 1, 1, C))."""
    config = model.config
    backbone = config.backbone
    if backbone is None or backbone.preact:
        raise ValueError("export_hybrid_npz: the official layout holds a hybrid with a non-pre-activation ResNet")
    if (backbone.weight_std, backbone.weight_std_eps, backbone.norm_eps, backbone.padding) != (
        "vit_jax",
        1e-5,
        1e-6,
        "same",
    ):
        log.warning("export_hybrid_npz: the backbone's numerics are not vit_jax's; its outputs will differ slightly")
    state = model.state_dict()
    # The transformer part, viewed as the plain ViT on the feature map, is written by export_npz.
    feature_size = tuple(side // backbone.stride for side in config.image_size)
    with torch.device("meta"):
        transformer = VisionTransformer(
            config.replace(backbone=None, in_channels=backbone.out_channels, image_size=feature_size)
        )
    transformer.load_state_dict({k: v for k, v in state.items() if not k.startswith(BACKBONE)}, assign=True)
    path = export_npz(transformer, path)
    arrays = read_arrays(path)
    conv_to_flax = CONV[1]
    for flax, module, kind in backbone_table(backbone):
        if kind == "conv":
            arrays[f"{flax}/kernel"] = conv_to_flax(state[f"{BACKBONE}{module}.weight"].cpu().float().numpy())
        else:
            for flax_param, torch_param in (("scale", "weight"), ("bias", "bias")):
                arrays[f"{flax}/{flax_param}"] = (
                    state[f"{BACKBONE}{module}.{torch_param}"].cpu().float().numpy().reshape(1, 1, 1, -1)
                )
    # allow_pickle named: float32 arrays need no pickle, and no array key can be taken for the flag
    contiguous = {key: np.ascontiguousarray(value, dtype=np.float32) for key, value in arrays.items()}
    np.savez(path, allow_pickle=False, **contiguous)
    return path


# -- timm state dicts ------------------------------------------------------------------------------
def with_timm_backbone(
    config: ViTConfig, state: Mapping[str, torch.Tensor], source: str
) -> tuple[ViTConfig, dict[str, torch.Tensor]]:
    """A timm ViT state dict whose patch_embed has a ResNetV2 backbone (vit_*_r*_s*): add the
    backbone, read off the keys, to the config convert_timm inferred for the plain ViT."""
    state = dict(state)
    if not any(key.startswith(BACKBONE) for key in state):
        return config, state
    # timm's stem-only hybrids (vit_tiny_r_s16_p8) hold the stem as the backbone itself.
    state = rename_keys(state, [(rf"^{re.escape(BACKBONE)}(conv|norm)\.", rf"{BACKBONE}stem.\1.")])
    root = state.get(f"{BACKBONE}stem.conv.weight")
    if root is None or f"{BACKBONE}stem.norm.weight" not in state:
        raise CheckpointError(
            f"{source}: the hybrid backbone needs {BACKBONE}stem.conv and stem.norm (a non-pre-activation ResNetV2)"
        )
    width, in_channels, size, _ = root.shape
    units = {(int(m[1]), int(m[2])) for key in state if (m := TIMM_UNIT.match(key))}
    backbone = timm_backbone(count_units(units, 0, source), width, stem_of(size, source))
    config = config.replace(
        backbone=backbone,
        in_channels=in_channels,
        image_size=tuple(side * backbone.stride for side in config.image_size),
    )
    return config, state
