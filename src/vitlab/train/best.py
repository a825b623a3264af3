"""The best model by a validation metric, and early stopping on it (run.keep_best_by, run.early_stop_patience).

DIR stays the last model; with run.keep_best_by, DIR/best/ is a model folder of the evaluation with the
best value of that metric (val_loss: lowest; val_top1, val_top5: highest; strictly better replaces it, as
selection.improves), written as the evaluation happens, with its own summary.json. With
run.early_stop_patience N, the run ends after N evaluations in a row without a better value. The best
value, its step and the count are checkpoint state, so that a resumed run decides as the whole one.
DIR/summary.json records best_by, best_value, best_step and, when it happened, stopped_early_at_step.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, cast

from vitlab.model import ConfigError, VisionTransformer
from vitlab.weights import save_pretrained

from .atomic_files import atomic_folder
from .callbacks import Callback, TrainingRun
from .outputs import SUMMARY_FILE
from .selection import improves

log = logging.getLogger("vitlab")

BEST_FOLDER = "best"
# Of the best evaluation's row, in DIR/best/summary.json.
ROW_NUMBERS = ("step", "epoch", "val_top1", "val_top5", "val_loss", "loss", "lr")


class BestModel(Callback):
    """Track `metric` over the evaluations; write DIR/best/ when `save` and stop after `patience`."""

    def __init__(self, out: str | Path, metric: str, save: bool, patience: int | None) -> None:
        self.folder = Path(out) / BEST_FOLDER
        self.metric, self.save, self.patience = metric, save, patience
        self.value: float | None = None
        self.step: int | None = None
        self.without_improvement = 0  # evaluations in a row since the best
        self.stopped_at: int | None = None

    def on_train_start(self, trainer: TrainingRun) -> None:
        if self.metric == "val_top5" and len(trainer.class_names) <= 5:
            raise ConfigError(
                f"run.keep_best_by=val_top5: the data has {len(trainer.class_names)} classes, "
                f"so top-5 is not measured; choose val_top1 or val_loss"
            )
        # A run resumed after it stopped early stays stopped.
        if self.stopped_at is not None or self._out_of_patience():
            self._stop(trainer)

    def on_evaluate(self, trainer: TrainingRun, row: dict[str, Any]) -> None:
        value = row[self.metric]
        if improves(value, self.value, self.metric):
            self.value, self.step, self.without_improvement = value, row["step"], 0
            if self.save:
                self._write(trainer, row)
        else:
            self.without_improvement += 1
        if self._out_of_patience() and trainer.step < trainer.total_steps:
            log.info(
                "step %d: %s has not improved on %.4f (step %d) for %d evaluations "
                "(run.early_stop_patience); stopping early",
                trainer.step,
                self.metric,
                self.value,
                self.step,
                self.without_improvement,
            )
            self._stop(trainer)

    def _out_of_patience(self) -> bool:
        return self.patience is not None and self.without_improvement >= self.patience

    def _stop(self, trainer: TrainingRun) -> None:
        self.stopped_at = trainer.step
        trainer.total_steps = trainer.step

    def _write(self, trainer: TrainingRun, row: dict[str, Any]) -> None:
        summary = {key: row[key] for key in ROW_NUMBERS if key in row}
        summary.update(
            best_by=self.metric,
            recipe=trainer.config.recipe,
            data=trainer.config.data.source,
        )
        with atomic_folder(self.folder) as partial:
            save_pretrained(cast(VisionTransformer, trainer.eval_model), partial, training=summary)
            (partial / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
        log.info(
            "step %d: best %s so far (%.4f); model written to %s",
            row["step"],
            self.metric,
            row[self.metric],
            self.folder,
        )

    def on_train_end(self, trainer: TrainingRun, summary: dict[str, Any] | None) -> None:
        """Add the best evaluation and any early stop to the finished run's summary.json."""
        if summary is None:
            return
        summary.update(best_by=self.metric, best_value=self.value, best_step=self.step)
        if self.save:
            summary["best_folder"] = BEST_FOLDER
        if self.stopped_at is not None:
            summary["stopped_early_at_step"] = self.stopped_at
        (trainer.out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")

    def state_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "value": self.value,
            "step": self.step,
            "without_improvement": self.without_improvement,
            "stopped_at": self.stopped_at,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value, self.step = state["value"], state["step"]
        self.without_improvement, self.stopped_at = (
            state["without_improvement"],
            state["stopped_at"],
        )
