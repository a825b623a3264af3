"""When the training loop evaluates and when it writes a checkpoint (run.eval_every, run.ckpt_every_*)."""

from __future__ import annotations

from .config import RunSpec


def evaluation_due(run: RunSpec, step: int, total_steps: int, epoch_ended: bool) -> bool:
    """At the last step, every run.eval_every steps, or (without it) at the end of every epoch."""
    every = run.eval_every
    return step == total_steps or (every is not None and step % every == 0) or (every is None and epoch_ended)


def checkpoint_due(
    run: RunSpec, step: int, *, evaluated: bool, stopping: bool, seconds_since: float, skipping: bool
) -> bool:
    """At every evaluation, every run.ckpt_every_steps / _minutes and on a stop signal; never while
    steps are being skipped as non-finite, so that the last good checkpoint survives --keep-ckpts."""
    if skipping:
        return False
    every, minutes = run.ckpt_every_steps, run.ckpt_every_minutes
    return bool(evaluated or stopping or (every and step % every == 0) or (minutes and seconds_since >= 60 * minutes))
