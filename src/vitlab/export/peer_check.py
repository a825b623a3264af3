"""Checking a folder written for timm or transformers with that library itself: it builds the
model from the folder alone, and its logits are compared with vitlab's on the same inputs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from vitlab.model import BiTResNet, VisionTransformer

from .validate import FP32_TOLERANCE, TracePlan, Validation

log = logging.getLogger("vitlab")

LIBRARIES = {"timm": "timm", "hf": "transformers"}


@dataclass
class Unchecked:
    """A folder written but not checked, and why."""

    reason: str

    def __str__(self) -> str:
        return f"not checked: {self.reason}"


def open_peer(folder: Path, format: str) -> torch.nn.Module:
    """The peer's model, built from the folder as its users would build it, in eval mode."""
    if format == "timm":
        import timm

        return timm.create_model(f"local-dir:{folder}", pretrained=True).eval()
    import transformers

    return transformers.AutoModelForImageClassification.from_pretrained(str(folder)).eval()  # ViT or Bit


def check_peer_folder(
    model: VisionTransformer | BiTResNet,
    folder: Path,
    format: str,
    plan: TracePlan = TracePlan(),
    tolerance: float = FP32_TOLERANCE,
) -> Validation | Unchecked:
    """Logits of the peer's model against vitlab's (ExportMismatchError above `tolerance`)."""
    try:
        peer = open_peer(folder, format)
    except ModuleNotFoundError as error:
        log.warning("%s: written, but %s is not installed to check it", folder, error.name)
        return Unchecked(f"{LIBRARIES[format]} is not installed")
    candidate: Callable[[torch.Tensor], torch.Tensor] = peer  # a timm model returns the logits
    if format != "timm":

        def hf_logits(images: torch.Tensor) -> torch.Tensor:
            return peer(pixel_values=images).logits  # a transformers model returns an output object

        candidate = hf_logits
    return plan.check(model.float().eval(), candidate, f"{folder} ({LIBRARIES[format]})", tolerance)
