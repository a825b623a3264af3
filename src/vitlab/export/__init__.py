"""Taking a trained ViT elsewhere: ONNX (checked with onnxruntime), torch.export programs, the
official vit_jax .npz layout, and one classifier interface over PyTorch and ONNX runtimes."""

from __future__ import annotations

from pathlib import Path

from vitlab.model import VisionTransformer
from vitlab.weights import export_npz, load

from .metadata import ModelInfo
from .onnx import export_onnx
from .program import export_program, read_program_info
from .runtime import RUNTIMES, Classifier, OnnxClassifier, TorchClassifier, open_classifier
from .validate import FP32_TOLERANCE, ExportMismatchError, Validation, compare

FORMATS = ("onnx", "export", "npz")


def export_model(
    model: VisionTransformer,
    format: str,
    path: str | Path,
    *,
    dynamic_batch: bool = True,
    batch_size: int = 1,
    tolerance: float = FP32_TOLERANCE,
) -> tuple[Path, Validation]:
    """Write `model` in `format` and check the written file against the model; returns (file, check)."""
    path = Path(path)
    if format == "onnx":
        return path, export_onnx(model, path, dynamic_batch=dynamic_batch, batch_size=batch_size, tolerance=tolerance)
    if format == "export":
        return path, export_program(model, path, dynamic_batch=dynamic_batch, batch_size=batch_size, tolerance=tolerance)
    if format == "npz":
        written = export_npz(model, path)
        config = model.config
        # The layout has no place for numerics; read it back with the model's to check the tensors.
        reloaded = load(written, act=config.act, norm_eps=config.norm_eps)
        sizes = (1, 3)
        return written, compare(model.eval(), reloaded, config.in_channels, config.image_size, sizes, str(written), tolerance)
    raise ValueError(f"unknown export format {format!r}; choose one of {', '.join(FORMATS)}")


__all__ = [
    "Classifier",
    "ExportMismatchError",
    "FORMATS",
    "ModelInfo",
    "OnnxClassifier",
    "RUNTIMES",
    "TorchClassifier",
    "Validation",
    "export_model",
    "export_onnx",
    "export_program",
    "open_classifier",
    "read_program_info",
]
