"""A torch.export program (`.pt2`): the model's graph and weights, loadable without vitlab's code.

TorchScript is deprecated in this torch; torch.export is its successor. The archive also holds
the model's input size, preprocessing, class names and config (metadata.py) as an extra file. Load with
`torch.export.load(path).module()`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from vitlab.model import BiTConfig, BiTResNet, VisionTransformer, ViTConfig

from .metadata import config_from_metadata, metadata_strings
from .validate import FP32_TOLERANCE, TracePlan, Validation, prepare

METADATA_FILE = "vitlab.json"


def export_program(
    model: VisionTransformer | BiTResNet,
    path: str | Path,
    plan: TracePlan = TracePlan(),
    *,
    tolerance: float = FP32_TOLERANCE,
) -> Validation:
    """Write `model` (float32, eval mode) as a torch.export archive and check the reloaded program."""
    model, path = prepare(model, path)
    program = torch.export.export(model, (plan.example(model.config),), dynamic_shapes=plan.dynamic_shapes())
    metadata = json.dumps(metadata_strings(model.config))
    torch.export.save(program, path, extra_files={METADATA_FILE: metadata})
    return plan.check(model, torch.export.load(path).module(), str(path), tolerance)


def read_program_config(path: str | Path) -> ViTConfig | BiTConfig:
    """The config stored with a program written by export_program."""
    extra = {METADATA_FILE: ""}
    torch.export.load(path, extra_files=extra)
    if not extra[METADATA_FILE]:
        raise ValueError(f"{path}: not exported by vitlab (no {METADATA_FILE} in the archive)")
    return config_from_metadata(json.loads(extra[METADATA_FILE]), str(path))
