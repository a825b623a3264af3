"""The best evaluation by a validation metric, and what a run does with it: one tracker for run.keep_best
(end the run with its weights), run.keep_best_by (also write it to DIR/best/) and run.early_stop_patience
(stop after that many evaluations in a row without a better one).

The metric is run.keep_best_by, else val_top1 (val_loss: lowest; val_top1, val_top5: highest). An
evaluation becomes the best only when strictly better (the first always does), as Keras'
ModelCheckpoint(monitor="val_accuracy", save_best_only=True) keeps weights. With run.keep_best its weights
are kept in memory and restored at the end, so DIR holds the best model; otherwise DIR stays the last
model. DIR/best/ is a model folder of the best evaluation, written as it happens, with its own
summary.json. The tracker's state, kept weights included, is checkpoint state, so that a resumed run
decides as the whole one. DIR/summary.json records best_by, best_value, best_step and, when it happened,
stopped_early_at_step.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from vitlab.model import ConfigError, VisionTransformer
from vitlab.weights import save_pretrained

from .atomic_files import atomic_folder
from .callbacks import Callback, TrainingRun
from .options import RunSpec
from .outputs import SUMMARY_FILE

log = logging.getLogger("vitlab")

BEST_FOLDER = "best"
# Of the best evaluation's row, in DIR/best/summary.json.
ROW_NUMBERS = ("step", "epoch", "val_top1", "val_top5", "val_loss", "loss", "lr")


def lower_is_better(metric: str) -> bool:
    return metric.endswith("loss")


def improves(value: float, best: float | None, metric: str) -> bool:
    """Whether `value` of `metric` is strictly better than `best` (None: nothing yet, so it is)."""
    if best is None:
        return True
    return value < best if lower_is_better(metric) else value > best


class BestModel(Callback):
    """Track `metric` over the evaluations; keep the best weights when `keep`, write DIR/best/ when `save`,
    stop after `patience` evaluations without a better value."""

    def __init__(
        self,
        out: str | Path,
        metric: str = "val_top1",
        *,
        keep: bool = False,
        save: bool = False,
        patience: int | None = None,
    ) -> None:
        self.folder = Path(out) / BEST_FOLDER
        self.metric, self.keep, self.save, self.patience = metric, keep, save, patience
        self.value: float | None = None
        self.step: int | None = None
        self.weights: dict[str, torch.Tensor] | None = None  # of the best evaluation, when `keep`
        self.without_improvement = 0  # evaluations in a row since the best
        self.stopped_at: int | None = None

    @classmethod
    def for_run(cls, run: RunSpec, main: bool) -> BestModel | None:
        """The tracker a run's settings ask for, if any. Every process keeps the weights; process 0
        (`main`) alone writes DIR/best/."""
        if not (run.keep_best or run.keep_best_by or run.early_stop_patience):
            return None
        save = main and run.keep_best_by is not None
        return cls(
            str(run.out),
            run.keep_best_by or "val_top1",
            keep=run.keep_best,
            save=save,
            patience=run.early_stop_patience,
        )

    def update(self, step: int, value: float, model: nn.Module) -> bool:
        """Whether `value` (of self.metric) beats the best so far; if it does, it becomes the best, with
        `model`'s weights when `keep`."""
        if not improves(value, self.value, self.metric):
            self.without_improvement += 1
            return False
        self.value, self.step, self.without_improvement = value, step, 0
        if self.keep:
            self.weights = {name: tensor.detach().to("cpu", copy=True) for name, tensor in model.state_dict().items()}
        return True

    def restore(self, model: nn.Module) -> None:
        """Put the kept best weights back into `model` (with `keep`; otherwise it stays the last)."""
        if self.weights is not None:
            model.load_state_dict(self.weights)

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
        if self.update(row["step"], row[self.metric], trainer.eval_model):
            if self.keep:
                log.info("step %d: best %s so far; weights kept", row["step"], self.metric)
            if self.save:
                self._write(trainer, row)
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
            "weights": self.weights,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value, self.step, self.weights = state["value"], state["step"], state.get("weights")
        self.without_improvement, self.stopped_at = (
            state["without_improvement"],
            state["stopped_at"],
        )
