"""ONNX export through torch.onnx's dynamo exporter, validated with onnxruntime.

The dynamo exporter (torch.export + onnxscript) is the default of this torch; the TorchScript-based
one is deprecated with TorchScript. The graph takes `images` (B, C, H, W) with a symbolic batch
axis when asked and returns `logits` (B, K); the model's input size, preprocessing and class
names (and the whole config) go into the file's metadata_props (metadata.py). After writing, onnxruntime runs the file
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

from vitlab.model import BiTResNet, VisionTransformer

from .metadata import INPUT_NAME, OUTPUT_NAME, metadata_strings
from .validate import FP32_TOLERANCE, TracePlan, Validation, prepare

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


def onnx_session(path: str | Path, threads: int | None = None):  # -> onnxruntime.InferenceSession
    """A CPU session; `threads` intra-op threads (default: onnxruntime's, one per core)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only
    if threads is not None:
        options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def export_onnx(
    model: VisionTransformer | BiTResNet,
    path: str | Path,
    plan: TracePlan = TracePlan(),
    *,
    opset: int | None = None,
    tolerance: float = FP32_TOLERANCE,
) -> Validation:
    """Write `model` (float32, eval mode) to `path` and check it with onnxruntime."""
    model, path = prepare(model, path)
    with quiet_exporter():
        program = torch.onnx.export(
            model,
            (plan.example(model.config),),
            dynamo=True,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            opset_version=opset,
            verbose=False,
            dynamic_shapes=plan.dynamic_shapes(),
        )
        assert program is not None  # dynamo=True returns the ONNXProgram (None is the legacy exporter's)
        program.model.metadata_props.update(metadata_strings(model.config))
        weight_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        program.save(path, external_data=weight_bytes > PROTOBUF_LIMIT)

    session = onnx_session(path)

    def run(images: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(session.run([OUTPUT_NAME], {INPUT_NAME: images.numpy().astype(np.float32)})[0])

    return plan.check(model, run, str(path), tolerance)
