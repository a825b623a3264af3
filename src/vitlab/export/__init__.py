"""Taking a trained model elsewhere: ONNX (checked with onnxruntime), torch.export programs, the
official vit_jax .npz layout, folders timm and transformers load (checked by them), and an ONNX
file run as a vitlab model. Every family exports to ONNX and torch.export; the .npz layout holds
ViTs and hybrids (vit_jax has no BiT classifier)."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from vitlab.model import BiTResNet, VisionTransformer
from vitlab.output_files import staged
from vitlab.weights import export_npz, load, save_pretrained
from vitlab.weights.hybrid import export_hybrid_npz

from .metadata import config_from_metadata, metadata_strings
from .onnx import export_onnx
from .onnx_runtime import RUNTIMES, OnnxModel, open_model
from .peer_check import Unchecked, check_peer_folder
from .program import export_program, read_program_config
from .quantize import INT8_TOLERANCE, QUANTIZATIONS, export_quantized, quantize_onnx, quantized_path
from .validate import (
    FP32_TOLERANCE,
    ExportMismatchError,
    TracePlan,
    Validation,
    compare,
    has_zero_head,
    with_random_head,
)

FORMATS = ("onnx", "export", "npz", "timm", "hf")


def export_model(
    model: VisionTransformer | BiTResNet,
    format: str,
    path: str | Path,
    plan: TracePlan = TracePlan(),
    tolerance: float = FP32_TOLERANCE,
    overwrite: bool = False,
) -> tuple[Path, Validation | Unchecked]:
    """Write `model` in `format` and check the written file against the model; returns (file, check).

    A zero head gives all-zero logits on both sides, so the check of that file proves nothing: a copy
    with a random head (the same graph) is then exported as well, and its check is the one returned.
    The file (or folder) is written beside `path` and put in place once checked, never through a link
    at `path` (vitlab.output_files): one that fails its check is not placed, and an existing `path` is
    refused unless `overwrite`.
    """
    with staged(path, "--out", overwrite) as staging:
        written, check = _export_with_probe(model, format, staging, plan, tolerance)
    return Path(path).parent / written.name, check  # where staged() put it (an npz adds its suffix)


def _export_with_probe(
    model: VisionTransformer | BiTResNet, format: str, path: str | Path, plan: TracePlan, tolerance: float
) -> tuple[Path, Validation | Unchecked]:
    written, check = _export_and_check(model, format, path, plan, tolerance)
    if not isinstance(check, Validation) or not has_zero_head(model):
        return written, check
    with tempfile.TemporaryDirectory() as folder:
        _, probe = _export_and_check(with_random_head(model), format, Path(folder) / Path(path).name, plan, tolerance)
    if not isinstance(probe, Validation):
        return written, probe
    return written, replace(
        probe,
        note="the head is zero, so the model's logits are all 0; checked on an export "
        "of a copy with a random head instead",
    )


def _export_and_check(
    model: VisionTransformer | BiTResNet, format: str, path: str | Path, plan: TracePlan, tolerance: float
) -> tuple[Path, Validation | Unchecked]:
    if format == "onnx":
        return Path(path), export_onnx(model, path, plan, tolerance=tolerance)
    if format == "export":
        return Path(path), export_program(model, path, plan, tolerance=tolerance)
    if format == "npz":  # the official layout has a fixed meaning and no batch axis to plan
        if isinstance(model, BiTResNet):
            raise ValueError(
                f"{model.config.name or 'BiT ResNet'}: the vit_jax .npz layout holds ViTs and hybrids, "
                f"not a BiT ResNet; export it as onnx or export"
            )
        config = model.config
        hybrid = config.backbone is not None
        written = (export_hybrid_npz if hybrid else export_npz)(model, path)
        # The layout has no place for numerics nor the grid's shape; read it back with the model's.
        numerics = dict(act=config.act, norm_eps=config.norm_eps, image_size=config.image_size)
        if hybrid:
            numerics["backbone"] = config.backbone
        reloaded = load(written, **numerics)
        return written, TracePlan().check(model.eval(), reloaded, str(written), tolerance)
    if format in ("timm", "hf"):  # a folder the peer library loads, checked by that library
        written = save_pretrained(model, path, format=format)
        return written, check_peer_folder(model, written, format, plan, tolerance)
    raise ValueError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}")


__all__ = [
    "ExportMismatchError",
    "FORMATS",
    "INT8_TOLERANCE",
    "OnnxModel",
    "QUANTIZATIONS",
    "RUNTIMES",
    "TracePlan",
    "Unchecked",
    "Validation",
    "compare",
    "config_from_metadata",
    "export_model",
    "export_onnx",
    "export_program",
    "export_quantized",
    "metadata_strings",
    "open_model",
    "quantize_onnx",
    "quantized_path",
    "read_program_config",
]
