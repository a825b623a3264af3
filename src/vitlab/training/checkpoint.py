"""Training checkpoints in DIR/checkpoints/: everything needed to continue a run exactly.

A checkpoint (`step-00001200.pt`, read with torch.load(weights_only=True), so it never runs code)
holds the model, optimiser, scheduler, EMA and gradient-scaler states, the step and epoch, the
position in the epoch's data order, the running training-loss sums, every random generator of every
process (python, numpy, torch, its GPU's; process 0's as `rng`, the others' in `process_rng`) and the
resolved run config. Data-loader workers need no
saved state: each sample's augmentation is seeded by (seed, epoch, index) (see loader.py).

Writes are atomic (atomic_files.py): the file is written under a temporary name in the same folder,
fsynced, its SHA-256 recorded beside it (`step-00001200.sha256`, in `sha256sum` format, written the same way),
renamed, and only then does the `latest` pointer (a one-line text file) name it. A crash at any
moment leaves `latest` naming a complete checkpoint; a full disk raises CheckpointError and leaves
the previous one in place. A sharded checkpoint (a folder, e.g. from torch.distributed.checkpoint)
is written the same way with `atomic_folder`, every file of it checksummed, and then `publish`ed.

A resumed run takes `newest_valid_checkpoint`: the one `latest` names if its checksums hold, else
the newest one whose checksums hold, saying in the log which were passed over and why; a run whose
`latest` pointer was deleted finds its newest checkpoint the same way. `read_resume_state` does
this for the Trainer and refuses a checkpoint of other settings than RESUMABLE_CHANGES allows.
"""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from vitlab.config_options import resumable_keys
from vitlab.model import ConfigError
from vitlab.weights import CheckpointError
from vitlab.weights.files import load_pickle

from .atomic_files import (
    CHECKSUMS,
    atomic_write,
    checksum_file,
    record_checksums,
    remove_partial_writes,
    verify_checkpoint,
)
from .config import TrainConfig
from .outputs import RUN_FILE
from .rng import restore_process_rng

log = logging.getLogger("vitlab")

FOLDER = "checkpoints"
LATEST = "latest"
FORMAT = "vitlab-train-state"
FORMAT_VERSION = 1
NAME = re.compile(r"step-(\d+)(?:\.pt)?")  # a file, or the folder of a sharded checkpoint
SHARDED_STATE = "trainer.pt"  # in a sharded checkpoint's folder: everything but the model and optimiser shards


def checkpoint_dir(out: str | Path) -> Path:
    return Path(out) / FOLDER


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}.pt"


# -- writing and reading ---------------------------------------------------------------------------
def save_checkpoint(out: str | Path, step: int, state: dict[str, Any], keep: int) -> Path:
    """Write `state` as the checkpoint of `step`, point `latest` at it, keep the newest `keep`."""
    folder = checkpoint_dir(out)
    folder.mkdir(parents=True, exist_ok=True)
    remove_partial_writes(folder)
    path = folder / checkpoint_name(step)
    document = {"format": FORMAT, "format_version": FORMAT_VERSION, **state}
    atomic_write(
        path,
        lambda file: torch.save(document, file),
        before_rename=lambda temporary: record_checksums(path, temporary),
    )
    publish(out, path, keep)
    return path


def publish(out: str | Path, path: Path, keep: int) -> None:
    """Point `latest` at the complete checkpoint `path` (a file, or a sharded checkpoint's folder),
    then delete all but the newest `keep` checkpoints."""
    folder = checkpoint_dir(out)
    atomic_write(folder / LATEST, lambda file: file.write(f"{path.name}\n".encode()))
    for old in list_checkpoints(out)[:-keep]:
        if old != path:
            shutil.rmtree(old) if old.is_dir() else old.unlink(missing_ok=True)
            checksum_file(old).unlink(missing_ok=True)
    kept = {checksum_file(p) for p in list_checkpoints(out)}
    for orphan in folder.glob(f"step-*{CHECKSUMS}"):  # of a checkpoint a crash kept from its rename
        if orphan not in kept:
            orphan.unlink(missing_ok=True)


def list_checkpoints(out: str | Path) -> list[Path]:
    """Complete checkpoints in DIR/checkpoints/, oldest first."""
    folder = checkpoint_dir(out)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := NAME.fullmatch(p.name))]
    return [path for _, path in sorted(found)]


def latest_checkpoint(out: str | Path) -> Path | None:
    """The checkpoint `latest` names, or None when the run has none."""
    pointer = checkpoint_dir(out) / LATEST
    if not pointer.is_file():
        return None
    name = pointer.read_text().strip()
    path = pointer.parent / name
    if not NAME.fullmatch(name) or not path.exists():
        raise CheckpointError(f"{pointer}: names {name!r}, which is not a checkpoint in {pointer.parent}")
    return path


def holds_checkpoints(out: str | Path) -> bool:
    """Whether a run has written checkpoints to `out` (a `latest` pointer, or any checkpoint)."""
    return (checkpoint_dir(out) / LATEST).is_file() or bool(list_checkpoints(out))


def newest_valid_checkpoint(out: str | Path) -> Path | None:
    """The checkpoint a resumed run continues from: the one `latest` names when its checksums hold,
    else the newest one whose checksums hold (the log says which were passed over, and why). None
    when `out` holds no checkpoint; CheckpointError when it holds some and none is intact."""
    folder = checkpoint_dir(out)
    try:
        named = latest_checkpoint(out)
    except CheckpointError as error:
        log.warning("%s; looking for the newest intact checkpoint instead", error)
        named = None
    found = list_checkpoints(out)[::-1]  # newest first
    if named is None and found and not (folder / LATEST).is_file():
        log.warning("%s: no %r pointer; looking for the newest intact checkpoint", folder, LATEST)
    candidates = ([named] if named is not None else []) + [path for path in found if path != named]
    problems = []
    for path in candidates:  # each checkpoint once: bounded by how many there are
        try:
            verify_checkpoint(path)
        except CheckpointError as error:
            problems.append(str(error))
            log.warning("passing over checkpoint %s: %s", path.name, error)
            continue
        if problems or path != named:
            log.warning("resuming from %s, the newest intact checkpoint", path)
        return path
    if not candidates:
        return None
    raise CheckpointError(
        f"{folder}: none of its {len(candidates)} checkpoint(s) is intact "
        f"(run.keep_ckpts keeps more); {'; '.join(problems)}"
    )


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a training checkpoint without executing anything stored in it (of a sharded checkpoint,
    the state besides the shards, which distributed.load_sharded reads into the model)."""
    path = Path(path)
    if path.is_dir():
        path = path / SHARDED_STATE
    document = load_pickle(path)  # truncated files and pickles with code: CheckpointError, nothing run
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a vitlab training checkpoint")
    if document.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: training checkpoint version {document.get('format_version')!r}; "
            f"this vitlab reads version {FORMAT_VERSION}"
        )
    return document


# -- the state of a run ----------------------------------------------------------------------------
class ResumableRun(Protocol):
    """What a checkpoint holds of the Trainer (trainer.py), besides the model and optimiser."""

    step: int
    epoch: int
    batch_in_epoch: int  # micro-batches of the current epoch already consumed
    loss_sum: float
    loss_count: int
    bad_steps: int

    @property
    def wall_time_s(self) -> float: ...  # of the whole run so far

    wall_time_before: float  # of the sessions before this one
    scheduler: Any
    ema: Any
    scaler: Any
    optimizer: Any

    @property
    def callbacks(self) -> Sequence[Any]: ...  # those with a state (Callback.state_dict) have it saved

    @property
    def data_fingerprint(self) -> Mapping[str, str | None]: ...  # "train", "val": LabelledImages.fingerprint


def _state(part: Any) -> Any:
    return part.state_dict() if part is not None else None


def run_state(run: ResumableRun, rng: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The progress, the scheduler, EMA, gradient-scaler and callback states (the best-model tracker's
    kept weights among them) and the generators (`rng`: every process's capture_rng, in rank order)."""
    return {
        "step": run.step,
        "epoch": run.epoch,
        "batch_in_epoch": run.batch_in_epoch,
        "scheduler": run.scheduler.state_dict(),
        "ema": _state(run.ema),
        "scaler": _state(run.scaler),
        "rng": rng[0],
        "process_rng": list(rng[1:]),
        "loss_sum": run.loss_sum,
        "loss_count": run.loss_count,
        "bad_steps": run.bad_steps,
        "wall_time_s": run.wall_time_s,
        "callbacks": {type(c).__name__: kept for c in run.callbacks if (kept := c.state_dict()) is not None},
        "data": dict(run.data_fingerprint),
    }


def check_same_data(state: Mapping[str, Any], fingerprint: Mapping[str, str | None], source: str) -> None:
    """A resumed run must read the images its checkpoint was trained on: with images added, removed or
    relabelled the split differs, and validation images may already have been trained on."""
    before = state.get("data") or {}  # none in a checkpoint written before the data was recorded
    for part in ("train", "val"):
        then, now = before.get(part), fingerprint.get(part)
        if then and now and then != now:
            raise ConfigError(
                f"--resume: the {part} split of data.source={source!r} is not the checkpoint's ({then} then, "
                f"{now} now): its validation images may already have been trained on; restore the data, or "
                "start a new run in another --out"
            )


def restore_run_state(run: ResumableRun, state: Mapping[str, Any], rank: int = 0, seed: int = 0) -> None:
    """Put the run where the checkpoint left it; process `rank` its own generators (rng.restore_process_rng)."""
    # The schedule is this run's (its total may be longer than the checkpoint's: check_same_run), taken
    # up at the checkpoint's step; for an unchanged total these are the checkpoint's numbers exactly.
    run.scheduler.load_state_dict({**state["scheduler"], "lr_lambdas": [None] * len(run.scheduler.lr_lambdas)})
    for group, base, factor in zip(run.optimizer.param_groups, run.scheduler.base_lrs, run.scheduler.lr_lambdas):
        group["lr"] = base * factor(run.scheduler.last_epoch)
    for callback in run.callbacks:
        if type(callback).__name__ in state.get("callbacks", {}):
            callback.load_state_dict(state["callbacks"][type(callback).__name__])
    if run.ema is not None:
        run.ema.load_state_dict(state["ema"])
    if run.scaler is not None and state["scaler"] is not None:
        run.scaler.load_state_dict(state["scaler"])
    if state.get("best"):  # run.keep_best's weights, where checkpoints kept them before one tracker did
        log.warning("the checkpoint's kept best weights are in an earlier layout and are not restored (CHANGELOG)")
    restore_process_rng(state, rank, seed)
    run.step, run.epoch, run.batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
    run.loss_sum, run.loss_count = state["loss_sum"], state["loss_count"]
    run.bad_steps = state.get("bad_steps", 0)
    run.wall_time_before = state["wall_time_s"]


# -- resuming --------------------------------------------------------------------------------------
# Settings a resumed run may change: they decide how the run executes, not what it learns (each
# field declares it: `option(..., resumable=True)` in config.py).
RESUMABLE_CHANGES = resumable_keys(TrainConfig)
# The run's length may grow: a finished (or unfinished) run continues to the longer total, its schedule
# recomputed over that total from the step reached. A shorter total is refused as any other change.
LONGER_ALLOWED = ("schedule.steps", "schedule.epochs")


def read_resume_state(
    out: Path, config: Mapping[str, Any], resume: bool, restarts: int = 0, is_main: bool = True
) -> tuple[Path, dict[str, Any]] | None:
    """The newest intact checkpoint of `out` and its state when resuming, checked against this run's
    `config` (TrainConfig.to_dict()) before any work; see newest_valid_checkpoint. A process that
    torchrun started again after one of the run's died (`restarts` > 0) resumes without being told."""
    if not resume and restarts:
        if is_main:
            log.warning("torchrun restart %d: resuming %s from its latest checkpoint without --resume", restarts, out)
        resume = True
    if not resume:
        if holds_checkpoints(out):
            raise ConfigError(
                f"{out} already holds a run ({out / FOLDER}); pass --resume to continue it or choose another --out"
            )
        return None
    latest = newest_valid_checkpoint(out)
    if latest is None:
        log.warning("--resume: %s holds no checkpoint yet; starting from step 0", out / FOLDER)
        return None
    state = load_checkpoint(latest)
    with checkpoint_problems(latest):
        check_same_run(out, config, state["config"])
    return latest, state


def check_same_run(out: Path, current: Mapping[str, Any], saved: Mapping[str, Any]) -> None:
    """ConfigError naming every setting outside RESUMABLE_CHANGES that differs from the checkpoint's;
    one of LONGER_ALLOWED set to a larger number (the other unset in both) is logged and allowed."""
    differ = {
        f"{section}.{name}": (saved_value, current[section].get(name))
        for section, values in saved.items()
        if isinstance(values, dict)
        for name, saved_value in values.items()
        if f"{section}.{name}" not in RESUMABLE_CHANGES and current[section].get(name) != saved_value
    }
    longer = [
        key
        for key, (before, now) in differ.items()
        if key in LONGER_ALLOWED and isinstance(before, int) and isinstance(now, int) and now > before
    ]
    if len(differ) == len(longer) == 1:
        ((before, now),) = differ.values()
        log.info(
            "--resume: %s %d -> %d: continuing %s to the longer total; the learning-rate schedule is "
            "recomputed over %d from the step reached",
            longer[0],
            before,
            now,
            out,
            now,
        )
        return
    changed = [f"{key}: checkpoint {before!r}, now {now!r}" for key, (before, now) in differ.items()]
    if changed:
        raise ConfigError(
            f"--resume: {out} was trained with other settings ({'; '.join(changed)}); "
            f"repeat them, e.g. with --config {out / RUN_FILE}"
        )


@contextlib.contextmanager
def checkpoint_problems(path: Path | None) -> Iterator[None]:
    """A resume checkpoint that parses but does not fit this run (a missing entry, tensors of
    another shape) is one CheckpointError naming the file, not a traceback from deep in torch."""
    try:
        yield
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        if isinstance(error, ConfigError):
            raise
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        reason = " ".join(lines)[:300] or type(error).__name__
        if isinstance(error, KeyError):
            reason = f"it has no entry {error}"
        raise CheckpointError(f"{path}: does not fit this run ({reason})") from None
