"""Top-k accuracy, and evaluating a classifier over a data loader."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


def topk_correct(logits: torch.Tensor, labels: torch.Tensor, ks: Sequence[int] = (1, 5)) -> list[int]:
    """How many of the (B, K) logits have the true label among their top k, for each k.

    k larger than the number of classes counts every sample as correct.
    """
    top = logits.topk(min(max(ks), logits.shape[1]), dim=1).indices  # (B, kmax)
    hits = top.eq(labels[:, None])  # (B, kmax)
    return [int(hits[:, :k].any(dim=1).sum()) for k in ks]


TOP5 = 5
Combine = Callable[[list[float]], list[float]]  # sums of one share of an evaluation -> of all shares


@dataclass
class Evaluation:
    """Accuracy over `count` images. `top5` is None (n/a) with 5 classes or fewer, where it would
    count every image as correct."""

    top1: float
    top5: float | None
    loss: float
    count: int
    num_classes: int

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)

    def describe(self) -> str:
        """ "top-1 0.8125  top-5 0.9844", or "top-5 n/a" with the reason."""
        return f"top-1 {self.top1:.4f}  {describe_top5(self.top5, self.num_classes)}"


def describe_top5(top5: float | None, num_classes: int) -> str:
    if top5 is None:
        return f"top-5 n/a ({num_classes} classes: every image would count as correct)"
    return f"top-5 {top5:.4f}"


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: Iterable[tuple[torch.Tensor, torch.Tensor]],
    *,
    device: torch.device | str | None = None,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    on_batch: Callable[[torch.Tensor, torch.Tensor], None] | None = None,
    combine: Combine | None = None,
) -> Evaluation:
    """Top-1 / top-5 accuracy and mean cross-entropy of `model` over `loader` of (images, labels).

    on_batch(logits, labels), float32 on the model's device, sees every batch in loader order
    (e.g. a PredictionLog for the confusion matrix and the calibration). combine: when `loader` is one
    share of the data, adds this share's sums (hits at 1 and 5, loss, images) to the other shares'.
    """
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    correct1 = correct5 = count = num_classes = 0
    loss_sum = 0.0
    try:
        for images, labels in loader:
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            with autocast():
                logits = model(images)
            logits = logits.float()
            loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
            hits1, hits5 = topk_correct(logits, labels, (1, TOP5))
            correct1, correct5, count = correct1 + hits1, correct5 + hits5, count + len(labels)
            num_classes = logits.shape[1]
            if on_batch is not None:
                on_batch(logits, labels)
    finally:
        model.train(was_training)
    if combine is not None:
        sums = combine([correct1, correct5, loss_sum, count])
        correct1, correct5, loss_sum, count = int(sums[0]), int(sums[1]), sums[2], int(sums[3])
    if count == 0:
        raise ValueError("evaluation data is empty")
    top5 = correct5 / count if num_classes > TOP5 else None
    return Evaluation(top1=correct1 / count, top5=top5, loss=loss_sum / count, count=count, num_classes=num_classes)
