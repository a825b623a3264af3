"""A torch.export program (`.pt2`): the model's graph and weights, loadable without vitlab's code.

TorchScript is deprecated in this torch; torch.export is its successor. The archive also holds
the model's input size, preprocessing and class names (metadata.py) as an extra file. Load with
`torch.export.load(path).module()`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from vitlab.model import VisionTransformer

from .metadata import INPUT_NAME, ModelInfo
from .validate import CHECK_BATCH_SIZES, FP32_TOLERANCE, TRACE_BATCH_SIZE, Validation, compare, sample_images

METADATA_FILE = "vitlab.json"


def export_program(
    model: VisionTransformer,
    path: str | Path,
    *,
    dynamic_batch: bool = True,
    batch_size: int = 1,
    tolerance: float = FP32_TOLERANCE,
) -> Validation:
    """Write `model` (float32, eval mode) as a torch.export archive and check the reloaded program."""
    model = model.float().eval()
    config = model.config
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    example = sample_images(TRACE_BATCH_SIZE if dynamic_batch else batch_size, config.in_channels, config.image_size)
    dynamic_shapes = {INPUT_NAME: {0: torch.export.Dim("batch")}} if dynamic_batch else None
    program = torch.export.export(model, (example,), dynamic_shapes=dynamic_shapes)
    metadata = json.dumps(ModelInfo.of(config).to_strings())
    torch.export.save(program, path, extra_files={METADATA_FILE: metadata})

    reloaded = torch.export.load(path).module()
    batches = CHECK_BATCH_SIZES if dynamic_batch else (batch_size,)
    return compare(model, reloaded, config.in_channels, config.image_size, batches, str(path), tolerance)


def read_program_info(path: str | Path) -> ModelInfo:
    """The metadata stored with a program written by export_program."""
    extra = {METADATA_FILE: ""}
    torch.export.load(path, extra_files=extra)
    if not extra[METADATA_FILE]:
        raise ValueError(f"{path}: not exported by vitlab (no {METADATA_FILE} in the archive)")
    return ModelInfo.from_strings(json.loads(extra[METADATA_FILE]), str(path))
