"""Past top-1: every prediction kept, the confusion matrix and the accuracy of each class."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class PredictionLog:
    """Called with each batch's (logits, labels) by `evaluate(on_batch=...)`: keeps, per image in
    loader order, the true label, the top-1 class and its softmax probability (three numbers, not
    the logits)."""

    labels: list[np.ndarray] = field(default_factory=list)
    predicted: list[np.ndarray] = field(default_factory=list)
    confidence: list[np.ndarray] = field(default_factory=list)

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        top = logits.float().softmax(dim=1).max(dim=1)
        self.labels.append(labels.cpu().numpy().astype(np.int64))
        self.predicted.append(top.indices.cpu().numpy().astype(np.int64))
        self.confidence.append(top.values.cpu().numpy().astype(np.float64))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(labels, predicted, confidence), each (N,)."""
        if not self.labels:
            raise ValueError("no predictions were logged")
        return (
            np.concatenate(self.labels),
            np.concatenate(self.predicted),
            np.concatenate(self.confidence),
        )


def confusion_matrix(labels: np.ndarray, predicted: np.ndarray, num_classes: int) -> np.ndarray:
    """(K, K) counts: row = true class, column = predicted class."""
    labels, predicted = (
        np.asarray(labels, dtype=np.int64),
        np.asarray(predicted, dtype=np.int64),
    )
    if labels.shape != predicted.shape:
        raise ValueError(f"{len(labels)} labels but {len(predicted)} predictions")
    outside = [int(v) for v in np.concatenate([labels, predicted]) if not 0 <= v < num_classes]
    if outside:
        raise ValueError(f"class index {outside[0]} is outside the {num_classes} classes")
    return np.bincount(labels * num_classes + predicted, minlength=num_classes**2).reshape(num_classes, num_classes)


def per_class(confusion: np.ndarray, class_names: Sequence[str]) -> dict[str, dict[str, float | int | None]]:
    """Per class: its images, how many were right, and the accuracy (None for a class with no images)."""
    if len(class_names) != len(confusion):
        raise ValueError(f"{len(class_names)} class names for a {len(confusion)}-class confusion matrix")
    rows = {}
    for index, name in enumerate(class_names):
        images, right = int(confusion[index].sum()), int(confusion[index, index])
        rows[str(name)] = {
            "images": images,
            "correct": right,
            "top1": right / images if images else None,
        }
    return rows
