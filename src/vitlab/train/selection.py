"""run.keep_best: the weights of the evaluation with the best validation top-1, kept through the run
and restored at its end, as Keras' ModelCheckpoint(monitor="val_accuracy", save_best_only=True)
keeps them (an evaluation replaces the kept weights only when strictly better; the first always does)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class BestWeights:
    def __init__(self) -> None:
        self.top1 = float("-inf")
        self.step: int | None = None
        self.weights: dict[str, torch.Tensor] | None = None

    def update(self, step: int, top1: float, model: nn.Module) -> bool:
        """Keep `model`'s weights if `top1` beats the best so far; whether it did."""
        if not top1 > self.top1:
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
