"""Callbacks: how a Trainer reports. The Trainer calls them; they never change what is learned.

Built in: ProgressBar (tqdm with loss, lr, images/s and ETA on a terminal; log lines otherwise) and
MetricsFile (DIR/metrics.jsonl, one JSON line per evaluation); run_logs.py's StepsCsv and TensorBoard
and best.py's BestModel (DIR/best/, early stopping). default_callbacks.py says which a run gets.
Subclass Callback for your own; a callback with state (state_dict) has it saved in every checkpoint.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import torch
from tqdm.auto import tqdm

from vitlab.progress import progress_enabled

from .config import TrainConfig
from .objectives import Objective
from .outputs import METRICS_FILE

log = logging.getLogger("vitlab")


class TrainingRun(Protocol):
    """What the callbacks read of the Trainer that calls them (trainer.py)."""

    config: TrainConfig
    out: Path
    step: int
    total_steps: int  # a callback may lower it to the current step to end the run there (early stopping)
    steps_per_epoch: int
    class_names: list[str]
    metrics: list[dict[str, Any]]  # the evaluation rows so far, a resumed run's earlier ones included
    objective: Objective  # what the loss and the evaluation rows measure (objectives.py)

    @property
    def lr(self) -> float: ...

    @property
    def images_per_second(self) -> float: ...

    @property
    def eval_model(self) -> torch.nn.Module: ...


class Callback:
    """Hooks called by Trainer.fit; each receives the trainer (its step, config, model, ...)."""

    def on_train_start(self, trainer: TrainingRun) -> None: ...

    def on_step_end(self, trainer: TrainingRun, loss: float) -> None: ...

    def on_evaluate(self, trainer: TrainingRun, row: dict[str, Any]) -> None: ...

    def on_checkpoint(self, trainer: TrainingRun, path: Path) -> None: ...

    def on_train_end(self, trainer: TrainingRun, summary: dict[str, Any] | None) -> None:
        """Called once as fit returns; summary is None when the run stopped early (signal, error)."""

    def state_dict(self) -> dict[str, Any] | None:
        """What a checkpoint keeps of this callback (None: nothing), so that a resumed run decides alike."""
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class ProgressBar(Callback):
    """A tqdm bar over optimiser steps when stderr is a terminal (and `vitlab --no-progress` was not given),
    else a log line every run.log_every steps."""

    def __init__(self, interactive: bool | None = None) -> None:
        self.interactive = progress_enabled() if interactive is None else interactive
        self.bar: tqdm | None = None
        self.start_time = 0.0
        self.start_step = 0

    def on_train_start(self, trainer: TrainingRun) -> None:
        self.start_time, self.start_step = time.perf_counter(), trainer.step
        if self.interactive:
            self.bar = tqdm(
                total=trainer.total_steps,
                initial=trainer.step,
                desc="train",
                unit="step",
                dynamic_ncols=True,
                file=sys.stderr,
            )

    def on_step_end(self, trainer: TrainingRun, loss: float) -> None:
        stats = {"loss": f"{loss:.4f}", "lr": f"{trainer.lr:.2e}", "img/s": f"{trainer.images_per_second:.0f}"}
        if self.bar is not None:
            self.bar.set_postfix(stats, refresh=False)
            self.bar.update(1)
        elif trainer.step % trainer.config.run.log_every == 0 or trainer.step == trainer.total_steps:
            done = trainer.step - self.start_step
            elapsed = time.perf_counter() - self.start_time
            eta = elapsed / max(done, 1) * (trainer.total_steps - trainer.step)
            log.info(
                "step %d/%d  loss %s  lr %s  %s img/s  eta %s",
                trainer.step,
                trainer.total_steps,
                stats["loss"],
                stats["lr"],
                stats["img/s"],
                timedelta(seconds=round(eta)),
            )

    def on_evaluate(self, trainer: TrainingRun, row: dict[str, Any]) -> None:
        described = trainer.objective.describe(row)
        message = f"step {row['step']} epoch {row['epoch']:.2f}: {described}  train loss {row['loss']:.4f}"
        if self.bar is not None:
            self.bar.write(message, file=sys.stderr)
        else:
            log.info("%s", message)

    def on_train_end(self, trainer: TrainingRun, summary: dict[str, Any] | None) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class MetricsFile(Callback):
    """Appends each evaluation to DIR/metrics.jsonl; on resume, first rewrites it with the run's rows up
    to the checkpoint's step (the interrupted run may have evaluated past its last checkpoint)."""

    def __init__(self, out: str | Path) -> None:
        self.path = Path(out) / METRICS_FILE

    def on_train_start(self, trainer: TrainingRun) -> None:
        self.path.write_text("".join(json.dumps(row) + "\n" for row in trainer.metrics))

    def on_evaluate(self, trainer: TrainingRun, row: dict[str, Any]) -> None:
        with self.path.open("a") as file:
            file.write(json.dumps(row) + "\n")
