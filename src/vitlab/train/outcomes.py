"""How `Trainer.fit` ends: a TrainResult, or one of the two ways a run stops early."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vitlab.model import BiTResNet, VisionTransformer


@dataclass
class TrainResult:
    out: Path
    summary: dict[str, Any]
    model: VisionTransformer | BiTResNet


class Interrupted(Exception):
    """SIGINT or SIGTERM stopped the run after a checkpoint was written."""

    def __init__(self, signal_name: str, step: int, checkpoint: Path | None) -> None:
        super().__init__(f"{signal_name} at step {step}; checkpoint {checkpoint}")
        self.signal_name, self.step, self.checkpoint = signal_name, step, checkpoint


class Diverged(RuntimeError):
    """run.max_bad_steps optimiser steps in a row had a non-finite loss or gradient."""
