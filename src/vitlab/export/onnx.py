"""ONNX export through torch.onnx's dynamo exporter, validated with onnxruntime.

The dynamo exporter (torch.export + onnxscript) is the default of this torch; the TorchScript-based
one is deprecated with TorchScript. The graph takes `images` (B, C, H, W) with a symbolic batch
axis when asked and returns `logits` (B, K); the model's input size, preprocessing and class
names go into the file's metadata_props (metadata.py). After writing, onnxruntime runs the file
on sample batches and the largest logit difference to PyTorch is reported; above 1e-4 the export
fails (timm users have found accuracy silently lost after export).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from vitlab.model import VisionTransformer

from .metadata import INPUT_NAME, OUTPUT_NAME, ModelInfo
from .validate import CHECK_BATCH_SIZES, FP32_TOLERANCE, TRACE_BATCH_SIZE, Validation, compare, sample_images

PROTOBUF_LIMIT = 2 * 1024**3  # bytes; larger models keep their weights in a side file (PATH.data)
EXPORTER_LOGGERS = ("onnxscript", "onnx_ir", "torch.onnx")  # they log every graph rewrite at INFO


@contextlib.contextmanager
def quiet_exporter() -> Iterator[None]:
    """Keep the exporter's warnings and per-pass notes out of the user's terminal."""
    loggers = [logging.getLogger(name) for name in EXPORTER_LOGGERS]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)


def onnx_session(path: str | Path):  # -> onnxruntime.InferenceSession
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def export_onnx(
    model: VisionTransformer,
    path: str | Path,
    *,
    dynamic_batch: bool = True,
    batch_size: int = 1,
    opset: int | None = None,
    tolerance: float = FP32_TOLERANCE,
) -> Validation:
    """Write `model` (float32, eval mode) to `path` and check it with onnxruntime."""
    model = model.float().eval()
    config = model.config
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    trace_batch = TRACE_BATCH_SIZE if dynamic_batch else batch_size
    example = sample_images(trace_batch, config.in_channels, config.image_size)
    options = dict(dynamic_shapes={INPUT_NAME: {0: torch.export.Dim("batch")}}) if dynamic_batch else {}
    with quiet_exporter():
        program = torch.onnx.export(
            model, (example,), dynamo=True, input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
            opset_version=opset, verbose=False, **options,
        )
        program.model.metadata_props.update(ModelInfo.of(config).to_strings())
        weight_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        program.save(path, external_data=weight_bytes > PROTOBUF_LIMIT)

    session = onnx_session(path)

    def run(images: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(session.run([OUTPUT_NAME], {INPUT_NAME: images.numpy().astype(np.float32)})[0])

    batches = CHECK_BATCH_SIZES if dynamic_batch else (batch_size,)
    return compare(model, run, config.in_channels, config.image_size, batches, str(path), tolerance)
