"""run.keep_best: the weights of the evaluation with the best validation top-1 (or run.keep_best_by's
metric), kept through the run and restored at its end, as Keras' ModelCheckpoint(monitor="val_accuracy",
save_best_only=True) keeps them (an evaluation replaces the kept weights only when strictly better; the
first always does). `improves` is that rule, which best.py's DIR/best/ and early stopping share."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def lower_is_better(metric: str) -> bool:
    return metric.endswith("loss")


def improves(value: float, best: float | None, metric: str) -> bool:
    """Whether `value` of `metric` is strictly better than `best` (None: nothing yet, so it is)."""
    if best is None:
        return True
    return value < best if lower_is_better(metric) else value > best


class BestWeights:
    def __init__(self, metric: str = "val_top1") -> None:
        self.metric = metric
        self.top1 = float("inf") if lower_is_better(metric) else float("-inf")  # the best value of `metric`
        self.step: int | None = None
        self.weights: dict[str, torch.Tensor] | None = None

    def update(self, step: int, top1: float, model: nn.Module) -> bool:
        """Keep `model`'s weights if `top1` (the value of self.metric) beats the best so far; whether it did."""
        if not improves(top1, self.top1, self.metric):
            return False
        self.top1, self.step = top1, step
        self.weights = {name: value.detach().to("cpu", copy=True) for name, value in model.state_dict().items()}
        return True

    def restore(self, model: nn.Module) -> None:
        if self.weights is not None:
            model.load_state_dict(self.weights)

    def state_dict(self) -> dict[str, Any]:
        return {"top1": self.top1, "step": self.step, "weights": self.weights}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state:
            self.top1, self.step, self.weights = state["top1"], state["step"], state["weights"]
