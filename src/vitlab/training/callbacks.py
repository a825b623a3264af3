"""Callbacks: how a Trainer reports. The Trainer calls them; they never change what is learned.

Built in: ProgressBar (tqdm with loss, lr, images/s and ETA on a terminal; log lines otherwise) and
MetricsFile (DIR/metrics.jsonl, one JSON line per evaluation); run_logs.py's StepsCsv and TensorBoard
and best.py's BestModel (the best evaluation: weights kept, DIR/best/, early stopping), which the Trainer
holds on every process; run_parts.build_callbacks says which of the others a run gets.
Subclass Callback for your own; a callback with state (state_dict) has it saved in every checkpoint.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
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

# The estimate waits for this much training (or the run's end), so that it averages several steps.
ESTIMATE_AFTER_SECONDS = 5.0


def duration(seconds: float) -> str:
    """`2 h 40 min`, `3 min 5 s`, `12 s`: a length as people say it."""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


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
    else log lines: every run.log_every steps and, from a watcher thread, at least every
    `every_seconds` of wall time, a batch slower than that included, so that a log redirected to a file
    shows a live run. Either way, once the first steps are timed, one line estimates the run's length."""

    def __init__(self, interactive: bool | None = None, every_seconds: float = 10.0) -> None:
        self.interactive = progress_enabled() if interactive is None else interactive
        self.every_seconds = every_seconds
        self.bar: tqdm | None = None
        self.start_time = 0.0
        self.start_step = 0
        self.first_step_seconds: float | None = None
        self.estimated = False
        self.last_line = 0.0
        self.last_step_time = 0.0
        self.stats: dict[str, str] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.watcher: threading.Thread | None = None

    def on_train_start(self, trainer: TrainingRun) -> None:
        self.start_time, self.start_step = time.perf_counter(), trainer.step
        self.last_line = self.last_step_time = self.start_time
        self.first_step_seconds, self.estimated = None, False
        if self.interactive:
            self.bar = tqdm(
                total=trainer.total_steps,
                initial=trainer.step,
                desc="train",
                unit="step",
                dynamic_ncols=True,
                file=sys.stderr,
            )
        else:
            self.stop.clear()
            self.watcher = threading.Thread(target=self._watch, args=(trainer,), name="vitlab-progress", daemon=True)
            self.watcher.start()

    def on_step_end(self, trainer: TrainingRun, loss: float) -> None:
        now = time.perf_counter()
        stats = {"loss": f"{loss:.4f}", "lr": f"{trainer.lr:.2e}", "img/s": f"{trainer.images_per_second:.0f}"}
        if self.first_step_seconds is None:
            self.first_step_seconds = now - self.start_time
        if not self.estimated and (
            now - self.start_time >= ESTIMATE_AFTER_SECONDS or trainer.step >= trainer.total_steps
        ):
            self._estimate(trainer, now)
        if self.bar is not None:
            self.bar.set_postfix(stats, refresh=False)
            self.bar.update(1)
            return
        with self.lock:
            self.stats, self.last_step_time = stats, now
            due = now - self.last_line >= self.every_seconds
            if due or trainer.step % trainer.config.run.log_every == 0 or trainer.step == trainer.total_steps:
                self._log_step(trainer, now)

    def _eta(self, trainer: TrainingRun, now: float) -> timedelta:
        done = trainer.step - self.start_step
        eta = (now - self.start_time) / max(done, 1) * (trainer.total_steps - trainer.step)
        return timedelta(seconds=round(eta))

    def _log_step(self, trainer: TrainingRun, now: float) -> None:
        self.last_line = now
        log.info(
            "step %d/%d  loss %s  lr %s  %s img/s  eta %s",
            trainer.step,
            trainer.total_steps,
            self.stats["loss"],
            self.stats["lr"],
            self.stats["img/s"],
            self._eta(trainer, now),
        )

    def _watch(self, trainer: TrainingRun) -> None:
        """Between steps: a line when `every_seconds` passed without one (the last step's numbers, or
        how long the step under way has run)."""
        while not self.stop.wait(min(1.0, self.every_seconds / 4)):
            now = time.perf_counter()
            with self.lock:
                if now - self.last_line < self.every_seconds:
                    continue
                if self.stats and self.last_step_time > self.last_line:
                    self._log_step(trainer, now)
                else:
                    self.last_line = now
                    log.info(
                        "step %d/%d  step %d under way for %.0f s",
                        trainer.step,
                        trainer.total_steps,
                        trainer.step + 1,
                        now - self.last_step_time,
                    )

    def _estimate(self, trainer: TrainingRun, now: float) -> None:
        """The run's length from the steps timed so far, the first (warm-up, allocation) left out when
        others were timed."""
        self.estimated = True
        done = trainer.step - self.start_step
        seconds, steps = now - self.start_time, done
        if done > 1 and self.first_step_seconds is not None:
            seconds, steps = seconds - self.first_step_seconds, done - 1
        per_step = seconds / max(steps, 1)
        left = trainer.total_steps - trainer.step
        batch = trainer.config.data.batch_size
        message = (
            f"estimate: {trainer.total_steps} steps of {batch} images, ~{duration(per_step * left)} to go "
            f"at {batch / per_step:.1f} img/s (timed over {steps} step{'s' * (steps != 1)})"
        )
        if self.bar is not None:
            self.bar.write(message, file=sys.stderr)
        else:
            log.info("%s", message)

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
        if self.watcher is not None:
            self.stop.set()
            self.watcher.join()
            self.watcher = None


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
