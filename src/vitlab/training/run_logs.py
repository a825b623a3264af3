"""Logs where people look: DIR/metrics.csv (always) and TensorBoard event files (run.tensorboard).

Both hold one entry per optimiser step (the step's loss; the learning rate after it, that of the next
step, as the progress bar and metrics.jsonl show it; images/s since the last evaluation)
and, at evaluations, the validation numbers of metrics.jsonl. A resumed run keeps what was logged up to
its checkpoint's step and drops the rest: the CSV is rewritten, the event files purged from the next
step on (SummaryWriter's purge_step), so no step appears twice.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from .callbacks import Callback, TrainingRun
from .outputs import STEPS_COLUMNS, STEPS_FILE, read_step_rows

TENSORBOARD_FOLDER = "tensorboard"
EVAL_COLUMNS = ("val_top1", "val_top5", "val_loss")


def step_row(trainer: TrainingRun, loss: float) -> dict[str, Any]:
    return {
        "step": trainer.step,
        "epoch": round(trainer.step / trainer.steps_per_epoch, 4),
        "loss": loss,
        "lr": trainer.lr,
        "images_per_s": round(trainer.images_per_second, 2),
    }


class StepsCsv(Callback):
    """DIR/metrics.csv: a row per step; the val_* columns are filled at evaluations, empty otherwise."""

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out)
        self.path = self.out / STEPS_FILE
        # this step's row, until an evaluation may complete it
        self.pending: dict[str, Any] | None = None

    def on_train_start(self, trainer: TrainingRun) -> None:
        kept = [row for row in read_step_rows(self.out) if row["step"] <= trainer.step] if trainer.step else []
        with self.path.open("w", newline="") as file:
            writer = csv.DictWriter(file, STEPS_COLUMNS)
            writer.writeheader()
            writer.writerows(kept)

    def on_step_end(self, trainer: TrainingRun, loss: float) -> None:
        self._flush()
        self.pending = step_row(trainer, loss)

    def on_evaluate(self, trainer: TrainingRun, row: dict[str, Any]) -> None:
        if self.pending is not None and self.pending["step"] == row["step"]:
            self.pending.update({key: row[key] for key in EVAL_COLUMNS})
        self._flush()

    def on_train_end(self, trainer: TrainingRun, summary: dict[str, Any] | None) -> None:
        self._flush()

    def _flush(self) -> None:
        if self.pending is not None:
            with self.path.open("a", newline="") as file:
                csv.DictWriter(file, STEPS_COLUMNS).writerow(self.pending)
            self.pending = None


class TensorBoard(Callback):
    """DIR/tensorboard/: train/loss, train/lr, train/images_per_s every step; val/top1, val/top5 (when
    measured) and val/loss at evaluations. `tensorboard --logdir DIR/tensorboard` shows them."""

    def __init__(self, out: str | Path) -> None:
        self.folder = Path(out) / TENSORBOARD_FOLDER
        self.writer: Any = None

    def on_train_start(self, trainer: TrainingRun) -> None:
        # imported here: tensorboard is slow to import
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: what an interrupted session logged past the checkpoint is hidden from readers.
        self.writer = SummaryWriter(str(self.folder), purge_step=trainer.step + 1 if trainer.step else None)

    def on_step_end(self, trainer: TrainingRun, loss: float) -> None:
        for key, value in step_row(trainer, loss).items():
            if key not in ("step", "epoch"):
                self.writer.add_scalar(f"train/{key}", value, trainer.step)

    def on_evaluate(self, trainer: TrainingRun, row: dict[str, Any]) -> None:
        for key in EVAL_COLUMNS:
            if row[key] is not None:
                self.writer.add_scalar(key.replace("_", "/", 1), row[key], row["step"])
        self.writer.flush()

    def on_train_end(self, trainer: TrainingRun, summary: dict[str, Any] | None) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
