"""Prediction streamed over image files: batches from vitlab.data.stream in, one result per file out,
in file order, as each batch is done; nothing about a file is kept after its result is handed on.

The model runs with vitlab's CPU paths (accel.accelerate) under the precision's autocast ("eager"),
or as optimize_for_inference's frozen, compiled copy with its weights cast once ("fast"); choose_path
decides between them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from vitlab.accel import kernels
from vitlab.accel.fast import optimize_for_inference
from vitlab.accel.layers import accelerate
from vitlab.data.stream import FileBatch
from vitlab.data.transforms import BatchNormalize

from .predict import class_names, model_config, top_classes

FastChoice = Literal["auto", "on", "off"]
FAST_CHOICES: tuple[FastChoice, ...] = ("auto", "on", "off")
# Compiling takes 20-60 s on a few CPU cores; at a few hundred images/s in bf16 (1.5x eager's, see
# docs/benchmarks.md) that is won back over about a thousand images.
FAST_MIN_IMAGES = 1000


@dataclass
class FileResult:
    """One file's outcome: its top classes, or why it was skipped; `features` with features=True."""

    position: int
    top: list[tuple[str, float]] | None
    skipped: str | None = None
    features: np.ndarray | None = None  # (D,) float32


class LogitsAndFeatures(nn.Module):
    """Logits and the pre-logits representation (what forward_head(pre_logits=True) returns, the
    features timm's inference script writes) from one pass."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model: Any = model  # a VisionTransformer or BiTResNet: forward_features, forward_head, head
        self.config = model_config(model)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.model.forward_head(self.model.forward_features(images), pre_logits=True)
        return self.model.head(features), features


def choose_path(choice: FastChoice, precision: str, device: torch.device, images: int) -> tuple[bool, str]:
    """(use the fast path, why), for the log."""
    if choice != "auto":
        return choice == "on", f"--fast {choice}"
    if precision == "fp32" and device.type == "cpu" and kernels.fp32_gemm() == "mkl":
        return False, "fp32 on CPU with MKL's GEMMs: the compiled path gains about 10%, less than its compilation costs"
    if images < FAST_MIN_IMAGES:
        return False, f"{images} images, fewer than the {FAST_MIN_IMAGES} that repay its compilation"
    return True, f"{precision} on {device.type}, {images} images"


class StreamPredictor:
    """Turns FileBatches into FileResults with a classifier (or LogitsAndFeatures when `features`)."""

    def __init__(
        self,
        model: nn.Module,
        *,
        topk: int,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
        autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
        fast: bool = False,
        features: bool = False,
        batch_size: int | None = None,
    ) -> None:
        config = model_config(model)
        self.names = class_names(config) if topk else []  # topk 0: the features alone (a feature extractor's)
        self.topk = topk
        self.device = device
        self.normalize = BatchNormalize(config.preprocessing.mean, config.preprocessing.std)
        network = LogitsAndFeatures(model) if features else model
        self.features = features
        self.autocast = contextlib.nullcontext if fast else autocast
        self.network = optimize_for_inference(network, dtype) if fast else accelerate(network, dtype).eval()
        # The compiled graph is built for one batch size: a short batch is padded to it (no recompiling).
        self.pad_to = batch_size if fast else None

    @torch.no_grad()
    def run(self, batch: FileBatch) -> list[FileResult]:
        results = [FileResult(position, None, why) for position, why in batch.skipped]
        count = len(batch.positions)
        if count:
            images = self.normalize(batch.images.to(self.device, non_blocking=True))
            if self.pad_to is not None and count < self.pad_to:
                images = torch.cat([images, images.new_zeros((self.pad_to - count, *images.shape[1:]))])
            with self.autocast():
                output = self.network(images)
            logits, features = output if self.features else (output, None)
            top = top_classes(logits[:count], self.names, self.topk) if self.topk else [[] for _ in range(count)]
            rows = features[:count].float().cpu().numpy() if features is not None else [None] * count
            results += [FileResult(p, t, None, f) for p, t, f in zip(batch.positions, top, rows)]
        return sorted(results, key=lambda result: result.position)

    def stream(self, batches: Iterable[FileBatch]) -> Iterator[list[FileResult]]:
        for batch in batches:
            yield self.run(batch)
