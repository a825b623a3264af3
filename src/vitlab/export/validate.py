"""Checking an exported model against the PyTorch model it came from, on the same inputs."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

log = logging.getLogger("vitlab")

FP32_TOLERANCE = 1e-4  # max |logit difference| accepted in float32
CHECK_BATCH_SIZES = (1, 3)  # a dynamic batch axis is checked at sizes other than the traced one (2)
TRACE_BATCH_SIZE = 2  # 1 would let the exporter specialise the batch axis


class ExportMismatchError(ValueError):
    """The exported model's outputs differ from PyTorch's by more than the tolerance."""


@dataclass
class Validation:
    max_abs_diff: float
    batch_sizes: tuple[int, ...]
    tolerance: float

    def __str__(self) -> str:
        sizes = ", ".join(map(str, self.batch_sizes))
        return f"max |logit difference| {self.max_abs_diff:.3g} (tolerance {self.tolerance:g}) on batch sizes {sizes}"


def sample_images(batch: int, channels: int, size: tuple[int, int], seed: int = 0) -> torch.Tensor:
    """Normalised-looking inputs (B, C, H, W): standard normal, the scale of a [-1, 1] image."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, channels, *size, generator=generator)


@torch.no_grad()
def compare(
    reference: torch.nn.Module,
    candidate: Callable[[torch.Tensor], torch.Tensor],
    channels: int,
    size: tuple[int, int],
    batch_sizes: Sequence[int],
    source: str,
    tolerance: float = FP32_TOLERANCE,
) -> Validation:
    """Run both on the same sample batches; raise ExportMismatchError above `tolerance`."""
    worst = 0.0
    for index, batch in enumerate(batch_sizes):
        images = sample_images(batch, channels, size, seed=index)
        expected = reference(images)
        got = candidate(images)
        if tuple(got.shape) != tuple(expected.shape):
            raise ExportMismatchError(f"{source}: output shape {tuple(got.shape)}, PyTorch gives {tuple(expected.shape)}")
        difference = (got - expected).abs().max().item()
        if math.isnan(difference) or difference > worst:  # max() would drop a NaN
            worst = difference
    result = Validation(worst, tuple(batch_sizes), tolerance)
    if not worst <= tolerance:  # also catches NaN
        raise ExportMismatchError(f"{source}: exported model disagrees with PyTorch: {result}")
    log.info("%s: %s", source, result)
    return result
