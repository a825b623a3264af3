"""Checking an exported model against the PyTorch model it came from, on the same inputs."""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from vitlab.evaluate.predict import model_config
from vitlab.model import BiTConfig, ViTConfig
from vitlab.progress import progress

from .metadata import INPUT_NAME

log = logging.getLogger("vitlab")
ModuleT = TypeVar("ModuleT", bound=torch.nn.Module)

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
    max_abs_logit: float = 0.0  # of the reference: a difference means little on near-zero logits
    note: str = ""  # how the check was made, when not on the model itself
    relative: bool = False  # the tolerance is a fraction of max_abs_logit (a quantized model's check)
    top1_agreement: float = 1.0  # share of the sample images whose top class is PyTorch's
    floor: float = 0.0  # with `relative`, the logit scale below which the tolerance stops shrinking

    @property
    def bound(self) -> float:
        """The largest difference accepted."""
        return self.tolerance * max(self.max_abs_logit, self.floor) if self.relative else self.tolerance

    def __str__(self) -> str:
        sizes = ", ".join(map(str, self.batch_sizes))
        accepted = f"{self.tolerance:g}"
        if self.relative:
            scale = "the largest logit" + (f" (at least {self.floor:g})" if self.floor else "")
            accepted += f" x {scale} = {self.bound:.3g}"
        text = (
            f"max |logit difference| {self.max_abs_diff:.3g} (tolerance {accepted}) "
            f"on batch sizes {sizes}, logits up to {self.max_abs_logit:.3g}"
        )
        if self.relative:
            text += f", top-1 agreement {100 * self.top1_agreement:.0f}% of {sum(self.batch_sizes)} sample images"
        return f"{text} ({self.note})" if self.note else text


def has_zero_head(model: torch.nn.Module) -> bool:
    """True when the classifier's weights are all zero (a fresh fine-tuning head, paper Sec. 3.2): its
    logits are then the same for every input, and comparing them checks nothing of the encoder."""
    head = getattr(model, "head", None)
    return isinstance(head, torch.nn.Linear) and not bool(head.weight.any())


def with_random_head(model: ModuleT, seed: int = 0) -> ModuleT:
    """A copy of `model` (same graph) whose head has random weights of unit-scale logits."""
    probe = copy.deepcopy(model)
    head = probe.head
    assert isinstance(head, torch.nn.Linear)  # only a linear head is zero (has_zero_head)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        weight = head.weight
        weight.copy_(torch.randn(weight.shape, generator=generator) / math.sqrt(weight.shape[1]))
        head.bias.copy_(torch.randn(head.bias.shape, generator=generator))
    return probe


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
    relative: bool = False,
    floor: float = 0.0,
) -> Validation:
    """Run both on the same sample batches; raise ExportMismatchError above `tolerance` (with `relative`,
    above that fraction of the largest reference logit, or of `floor` where the logits are smaller)."""
    worst = scale = 0.0
    agreeing = 0
    for index, batch in enumerate(progress(batch_sizes, "export check", total=len(batch_sizes))):
        images = sample_images(batch, channels, size, seed=index)
        expected = reference(images)
        got = candidate(images)
        if tuple(got.shape) != tuple(expected.shape):
            raise ExportMismatchError(
                f"{source}: output shape {tuple(got.shape)}, PyTorch gives {tuple(expected.shape)}"
            )
        difference = (got - expected).abs().max().item()
        scale = max(scale, expected.abs().max().item())
        agreeing += int((got.argmax(-1) == expected.argmax(-1)).sum())
        if math.isnan(difference) or difference > worst:  # max() would drop a NaN
            worst = difference
    result = Validation(
        worst,
        tuple(batch_sizes),
        tolerance,
        scale,
        relative=relative,
        top1_agreement=agreeing / sum(batch_sizes),
        floor=floor,
    )
    if not worst <= result.bound:  # also catches NaN
        raise ExportMismatchError(f"{source}: exported model disagrees with PyTorch: {result}")
    log.debug("%s: %s", source, result)
    return result


def prepare(model: ModuleT, path: str | Path) -> tuple[ModuleT, Path]:
    """The model as it is exported and compared (float32, eval mode) and the output path, its folder made."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return model.float().eval(), path


@dataclass(frozen=True)
class TracePlan:
    """How an exporter traces the model and how the written file is then checked: with a symbolic
    batch axis (traced at 2, checked at 1 and 3) or at one fixed batch size."""

    dynamic_batch: bool = True
    batch_size: int = 1

    def example(self, config: ViTConfig | BiTConfig) -> torch.Tensor:
        batch = TRACE_BATCH_SIZE if self.dynamic_batch else self.batch_size
        return sample_images(batch, config.in_channels, config.image_size)

    def dynamic_shapes(self) -> dict[str, Any] | None:
        return {INPUT_NAME: {0: torch.export.Dim("batch")}} if self.dynamic_batch else None

    def check(
        self,
        model: torch.nn.Module,
        candidate: Callable[[torch.Tensor], torch.Tensor],
        source: str,
        tolerance: float = FP32_TOLERANCE,
    ) -> Validation:
        batches = CHECK_BATCH_SIZES if self.dynamic_batch else (self.batch_size,)
        config = model_config(model)
        # A BiT ResNet's 50+ weight-standardised layers leave float32 differences that grow with the
        # logits: its tolerance is relative (a fraction of the largest logit, of 1 at least).
        bit = isinstance(config, BiTConfig)
        size = config.image_size
        return compare(
            model, candidate, config.in_channels, size, batches, source, tolerance, relative=bit, floor=float(bit)
        )
