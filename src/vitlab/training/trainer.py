"""The Trainer: from a TrainConfig to a model folder, one optimiser step at a time.

    trainer = Trainer(get_recipe("demo"))      # builds data, model, optimiser; resumes if asked
    result = trainer.fit()                      # trains, evaluates, checkpoints, writes DIR

DIR at the end holds the model (config.json with class names and preprocessing, model.safetensors,
loadable with vitlab.load), run.yaml (the resolved config), metrics.jsonl, summary.json,
training_curve.png and checkpoints/. The trainer knows nothing of argument parsing.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from vitlab.accel import accelerate
from vitlab.data.device_decode import device_batches
from vitlab.data.given import GivenData
from vitlab.model import BiTConfig, ConfigError, ViTConfig
from vitlab.runlock import RunLock
from vitlab.runtime import resolve_device, resolve_precision, torch_threads
from vitlab.weights import CheckpointError

from . import checkpoint as ckpt
from . import distributed, outputs, processes, run_parts
from .best import BestModel
from .callbacks import Callback
from .config import TrainConfig
from .loader import epoch_sampler, shut_down_workers
from .objectives import build_objective
from .optim import build_ema, build_optimizer, build_schedule, clip_gradients, total_steps
from .outputs import RUN_FILE, TrainResult
from .rng import capture_rng, process_seed, seed_everything
from .signals import Interrupted, stop_requests

log = logging.getLogger("vitlab")


class Diverged(RuntimeError):
    """run.max_bad_steps optimiser steps in a row had a non-finite loss or gradient (Trainer._skip_step)."""


class Trainer:
    """`architecture`, when given, is trained from scratch in place of model.variant and its fields:
    any ViTConfig, hybrid or BiTConfig (the experiments build BiT ResNets and hybrids of chosen
    sizes); its class count and names come from the data. `given`, when given, is the data in place
    of data.source (vitlab.train(dataset=...))."""

    resumed_from: Path | None  # the checkpoint this session continues, if any

    def __init__(
        self,
        config: TrainConfig,
        callbacks: Sequence[Callback] = (),
        architecture: ViTConfig | BiTConfig | None = None,
        given: GivenData | None = None,
    ) -> None:
        self.config = run_parts.check_run(config.validate(), architecture)
        self.architecture, self.given = architecture, given
        self.out = run_parts.run_folder(self.config)
        self.processes = processes.from_environment()  # under torchrun, one of several
        # One run per folder, from before the resume checkpoint is read until fit() ends; process 0 holds it.
        self.lock = RunLock(self.out)
        if self.processes.is_main:
            self.lock.acquire()
        with self.lock.released_if_failing(), processes.left_if_failing(self.processes):
            self._set_up(callbacks)

    def _set_up(self, callbacks: Sequence[Callback]) -> None:
        config = self.config
        self.sharded = config.run.data_parallel == "fsdp"
        # Process 0 alone reports and writes the metrics (all processes see the same numbers).
        main = self.processes.is_main
        self.best = BestModel.for_run(config.run, main)  # on every process: each ends with the kept weights
        best: list[Callback] = [self.best] if self.best is not None else []
        self.callbacks: list[Callback] = [*run_parts.build_callbacks(config), *best, *callbacks] if main else best
        self.processes = processes.start(self.processes, resolve_device(config.run.device))
        self.device = self.processes.device
        processes.check_shared_folder(self.out, self.lock.holder_path, self.processes)
        self.resumed_from, resume_state = self._resume_state()
        # The evaluation rows so far, read once here (before any process writes): outputs.py.
        self.metrics = outputs.earlier_metrics(self.out, resume_state["step"]) if resume_state else []
        seed_everything(config.run.seed)
        self.precision = resolve_precision(config.run.precision, self.device)
        self._build_model_and_data(resume_state)
        self._build_optimisation()
        self._start_progress()
        if self.processes.rank:  # each process its own dropout, stochastic depth and Mixup (rng.py)
            seed_everything(process_seed(config.run.seed, self.processes.rank))
        elif self.processes.distributed:
            log.info("process r draws its dropout, stochastic depth and Mixup from seed %d + r", config.run.seed)
        if resume_state is not None:
            with ckpt.checkpoint_problems(self.resumed_from):
                self.load_state_dict(resume_state)
            log.info("resuming %s from step %d (epoch %d)", self.out, self.step, self.epoch)

    def _build_model_and_data(self, resume_state: dict[str, Any] | None) -> None:
        """The model, its data splits and loaders, and the objective it trains for."""
        config = self.config
        resumed = (
            None if self.architecture or not resume_state else run_parts.resumed_architecture(config, resume_state)
        )
        self.model, splits, self.test_set = run_parts.build_model_and_data(
            config, self.architecture or resumed, self.processes, self.precision.name, self.given
        )
        self.class_names, self.train_images, self.val_images = splits.class_names, len(splits.train), len(splits.val)
        self.train_split = splits.train  # its images' digests go to DIR as the run starts (fit)
        self.data_fingerprint: Mapping[str, str | None] = splits.fingerprints()
        self.steps_per_epoch = run_parts.steps_per_epoch(config, len(splits.train))
        self.total_steps = total_steps(config.schedule, self.steps_per_epoch)
        # With a development split (data.dev_fraction), the source's validation split is the test split.
        self.train_loader, self.val_loader, self.test_loader = run_parts.build_loaders(
            config, splits, self.test_set, self.device.type == "cuda", self.processes
        )
        self.image_shape = (self.model.config.in_channels, *self.model.config.image_size)
        # Before the optimiser sees the model's parameters.
        self.objective = build_objective(config, self.model, len(self.class_names))

    def _build_optimisation(self) -> None:
        """The model on its device, wrapped for the processes, with its optimiser, schedule and average."""
        config = self.config
        accelerate(self.model.to(self.device), self.precision.compute_dtype)  # vitlab's CPU paths, in place
        self.model.set_grad_checkpointing(config.run.grad_checkpointing)
        self.parallel = distributed.wrap(self.model, self.processes, config.run.data_parallel, self.precision.dtype)
        self.network = torch.compile(self.parallel) if config.run.compile else self.parallel
        self.optimizer = build_optimizer(self.model, config.optim)
        self.scheduler = build_schedule(self.optimizer, config.schedule, self.steps_per_epoch)
        self.scaler = self.precision.grad_scaler()
        self.ema = build_ema(self.model, config.optim.ema_decay)

    def _start_progress(self) -> None:
        """Steps done and the place in the data order of a run yet to step (load_state_dict: a resumed one's)."""
        self.step, self.epoch = 0, 0
        self.batch_in_epoch = 0  # micro-batches of the current epoch already consumed
        self.loss_sum, self.loss_count = 0.0, 0  # training loss since the last evaluation
        self.wall_time_before = 0.0  # seconds spent by earlier sessions of a resumed run
        self.window_images, self.window_seconds = 0, 0.0
        self.session_start = time.perf_counter()
        self.stop_signal: str | None = None
        self.summary: dict[str, Any] | None = None
        self.bad_steps, self.bad_steps_in_row = 0, 0  # skipped for a non-finite loss or gradient

    def _resume_state(self) -> tuple[Path | None, dict[str, Any] | None]:
        """The checkpoint to continue (read_resume_state), the same step in every process: a refusal in
        one process is every process's, and processes that would resume from different steps (an --out
        that is not shared between nodes) stop, naming them."""
        config, mine = self.config, self.processes
        try:
            resume = ckpt.read_resume_state(self.out, config.to_dict(), config.run.resume, mine.restarts, mine.is_main)
            found: Any = (resume[1]["step"], str(resume[0])) if resume else (0, None)
        except (ConfigError, CheckpointError) as error:
            if not mine.distributed:
                raise
            resume, found = None, error
        everyone = processes.gather(found, mine)
        refused = [(rank, problem) for rank, problem in enumerate(everyone) if isinstance(problem, Exception)]
        if refused:
            rank, problem = refused[0]
            raise problem if rank == mine.rank else type(problem)(f"process {rank}: {problem}")
        if len({step for step, _ in everyone}) > 1:
            where = "; ".join(
                f"process {rank}: step {step} ({path or 'no checkpoint'})" for rank, (step, path) in enumerate(everyone)
            )
            raise ConfigError(
                f"run.out={self.out}: the processes would resume from different steps ({where}); every node "
                "needs the same --out, on storage they all share"
            )
        return resume or (None, None)

    def close(self) -> None:
        """End the data-loader workers and free the output folder (fit() does this when it ends)."""
        for loader in (self.train_loader, self.val_loader, self.test_loader):
            if loader is not None:
                shut_down_workers(loader)
        self.lock.release()

    # -- one optimiser step ------------------------------------------------------------------------
    def train_step(self, micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> float:
        """Forward and backward over the micro-batches, then one clipped optimiser step; the mean loss.
        The gradients are reduced over the processes once, in the last micro-batch's backward, and the
        device is waited for once: to decide, as torch's GradScaler does, whether the step is taken."""
        self.optimizer.zero_grad(set_to_none=True)
        losses = []
        count = len(micro_batches)
        for (images, labels), reduction in zip(micro_batches, distributed.micro_batches(self.parallel, count)):
            images = images.to(self.device, non_blocking=True)
            labels = labels.to(self.device, non_blocking=True)
            with reduction:
                loss = self.objective.loss(self.network, images, labels, self.precision.autocast)  # objectives.py
                scaled = loss / count
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            losses.append(loss.detach().float())
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        norm = clip_gradients(self.model, self.config.optim.grad_clip)
        *values, grad_norm = torch.stack([*losses, norm.float().to(losses[0].device)]).tolist()
        mean_loss = 0.0
        for value in values:
            mean_loss += value / count
        mean_loss = processes.mean_over_processes(mean_loss, self.processes)  # every process skips alike
        # With fp16 loss scaling, overflowing gradients are the scaler's to skip (it lowers the scale).
        if not math.isfinite(mean_loss) or (self.scaler is None and not math.isfinite(grad_norm)):
            self._skip_step(mean_loss, grad_norm)
            return mean_loss
        self.bad_steps_in_row = 0
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        if self.ema is not None:
            self.ema.update_parameters(self.model)
        return mean_loss

    def _skip_step(self, loss: float, grad_norm: float) -> None:
        """Leave weights, optimiser and EMA as they are; the step still counts, so the data order and
        the schedule move on. run.max_bad_steps skipped steps in a row stop the run (Diverged)."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.update()
        self.scheduler.step()
        self.bad_steps, self.bad_steps_in_row = self.bad_steps + 1, self.bad_steps_in_row + 1
        step, limit = self.step + 1, self.config.run.max_bad_steps
        what = f"loss {loss}" if not math.isfinite(loss) else f"gradient norm {grad_norm}"
        if self.bad_steps_in_row >= limit:
            last = ckpt.latest_checkpoint(self.out)
            raise Diverged(
                f"step {step}: non-finite {what}, {self.bad_steps_in_row} steps in a row "
                f"(run.max_bad_steps={limit}); stopped. Last good checkpoint: {last or 'none yet'}"
            )
        counts = (self.bad_steps_in_row, self.bad_steps, limit)
        log.warning(
            "step %d: non-finite %s; step skipped (%d in a row, %d in all; %d in a row stop the run)",
            step,
            what,
            *counts,
        )

    # -- the loop ----------------------------------------------------------------------------------
    def fit(self) -> TrainResult:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / RUN_FILE).write_text(self.config.to_yaml())
        self.summary = None
        try:
            if self.processes.is_main:
                outputs.record_training_images(self.out, self.train_split)
            self.session_start = self.last_checkpoint_time = time.perf_counter()
            with stop_requests(self._request_stop), torch_threads(self.config.run.threads):
                self._call("on_train_start")
                while self.step < self.total_steps:
                    self.train_epoch()
                return self._finish()
        finally:
            self._call("on_train_end", self.summary)
            processes.stop(self.processes)
            self.close()  # the workers end with the run, however it ends

    def train_epoch(self) -> None:
        """Steps to the end of the current epoch (from where a resumed run stopped) or of the run, each
        followed by its evaluation, checkpoint and stop request when due."""
        epoch_sampler(self.train_loader).set_epoch(self.epoch, self.batch_in_epoch * self.config.micro_batch_size)
        with device_batches(self.train_loader, self.device) as batches:
            self._train_steps(batches)

    def _train_steps(self, batches: Iterator[Any]) -> None:
        accum, micro, run = self.config.optim.grad_accum, self.config.micro_batch_size, self.config.run
        epoch_ended = False
        while not epoch_ended and self.step < self.total_steps:
            started = time.perf_counter()
            loss = self.train_step([next(batches) for _ in range(accum)])
            self.window_seconds += time.perf_counter() - started
            self.window_images += accum * micro
            self.step += 1
            self.batch_in_epoch += accum
            if self.batch_in_epoch >= self.steps_per_epoch * accum:
                self.epoch, self.batch_in_epoch, epoch_ended = self.epoch + 1, 0, True
            if not self.bad_steps_in_row:
                self.loss_sum, self.loss_count = self.loss_sum + loss, self.loss_count + 1
            self._call("on_step_end", loss)
            # Processes stop, and write checkpoints, together: on this one decision. A signal that comes
            # later (torchrun signals one process after another, and a handler runs as a collective returns)
            # is taken at the next step's end, never by one process alone.
            stopping = processes.any_process(self.stop_signal is not None, self.processes)
            if stopping:
                self.stop_signal = self.stop_signal or "SIGTERM"  # it reached another process first

            evaluated = run.evaluation_due(self.step, self.total_steps, epoch_ended)
            if evaluated:
                self.evaluate_and_log()
            since, skipping = time.perf_counter() - self.last_checkpoint_time, bool(self.bad_steps_in_row)
            due = run.checkpoint_due(
                self.step, evaluated=evaluated, stopping=stopping, seconds_since=since, skipping=skipping
            )
            if processes.any_process(due, self.processes):
                self.save_checkpoint()
                self.last_checkpoint_time = time.perf_counter()
            if stopping:
                raise Interrupted(self.stop_signal or "SIGTERM", self.step, ckpt.latest_checkpoint(self.out))

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    @property
    def images_per_second(self) -> float:
        return self.window_images / self.window_seconds if self.window_seconds else 0.0

    @property
    def eval_model(self) -> torch.nn.Module:
        """The averaged weights when EMA is on (they are what gets evaluated and saved)."""
        return self.ema.module if self.ema is not None else self.model

    def evaluate_and_log(self) -> dict[str, Any]:
        numbers, _ = self.objective.evaluate(
            self.eval_model, self._validation_batches(), self.device, self.precision.autocast, self._combine
        )
        row: dict[str, Any] = {"step": self.step, "epoch": round(self.step / self.steps_per_epoch, 4)}
        row.update(loss=self.loss_sum / max(self.loss_count, 1), lr=self.lr, **numbers)
        row.update(images_per_s=round(self.images_per_second, 2), wall_time_s=round(self.wall_time_s, 2))
        self.loss_sum, self.loss_count = 0.0, 0
        self.window_images, self.window_seconds = 0, 0.0
        self.metrics.append(row)
        self._call("on_evaluate", row)
        return row

    def _validation_batches(self) -> Any:
        """This process's share of the validation split (loader.eval_loader), with empty batches after
        it so that every process runs as many forward passes."""
        slices = self.val_loader.batch_sampler
        if not isinstance(slices, distributed.EvalSlices):
            return self.val_loader
        return distributed.padded(self.val_loader, slices.batches - len(slices), self.image_shape)

    def _combine(self, sums: list[float]) -> list[float]:
        return processes.sum_over_processes(sums, self.processes)

    @property
    def wall_time_s(self) -> float:
        return self.wall_time_before + (time.perf_counter() - self.session_start)

    def _finish(self) -> TrainResult:
        processes.barrier(self.processes)  # every process has taken its last step
        if not self.metrics or self.metrics[-1]["step"] != self.step:  # a resumed run that had already finished
            self.evaluate_and_log()
        if self.best is not None:
            self.best.restore(self.eval_model)
        model = distributed.whole_model(self.eval_model, self.processes, self.sharded)
        if self.processes.is_main:  # process 0 writes the model folder; the others wait for it
            self.summary = outputs.write_model_folder(self, model)
        processes.barrier(self.processes)
        return TrainResult(self.out, self.summary or {}, model)

    # -- checkpoints -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything a checkpoint holds to continue the run exactly (see checkpoint.py)."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            **ckpt.run_state(self, processes.gather(capture_rng(), self.processes)),
            "config": self.config.to_dict(),
            "model_config": self.model.config.to_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        ckpt.check_same_data(state, self.data_fingerprint, self.config.data.source)
        distributed.load_weights(self.resumed_from, state, self.model, self.optimizer, self.sharded)
        ckpt.restore_run_state(self, state, self.processes.rank, self.config.run.seed)

    def save_checkpoint(self) -> Path | None:
        keep = self.config.run.keep_ckpts
        path = distributed.save_checkpoint(
            self.out, self.step, self.state_dict(), self.model, self.optimizer, keep, self.processes, self.sharded
        )
        if path is not None:
            self._call("on_checkpoint", path)
        return path

    # -- signals and callbacks ---------------------------------------------------------------------
    def _request_stop(self, signal_name: str) -> None:
        self.stop_signal = signal_name
        then = "writing a checkpoint, then stopping (again to stop at once)"
        log.warning("%s: finishing step %d, %s", signal_name, self.step + 1, then)

    def _call(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(self, *args)


__all__ = ["Diverged", "Interrupted", "TrainResult", "Trainer"]
