"""Fault injection: `vitlab train` killed with SIGKILL at random steps (once in the middle of writing a
checkpoint) and stopped by SIGTERM, resumed each time, ends with bitwise the weights of the run that
was never interrupted (issue 6). Data-loader workers are on, as they would be in a real run.

The kill steps are random; the seed is printed and can be fixed with VITLAB_FAULT_SEED=N.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import TINY_FLAGS, assert_same_state, final_state
from vitlab.training import atomic_files as files
from vitlab.training import checkpoint as ckpt
from vitlab.training.outputs import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

STEPS = 40
# The tiny small-data run (RandAugment, Mixup/CutMix, drop path: many random streams) with dropout, an
# EMA, two micro-batches per step, an epoch boundary (1149 training digits: 35 steps of 32 an epoch)
# and a log line every step, so that the test knows where the run is.
FLAGS = [
    *TINY_FLAGS,
    "--steps",
    str(STEPS),
    "--eval-every",
    "20",
    "--ckpt-every-steps",
    "3",
    "--grad-accum",
    "2",
    "--ema",
    "0.9",
    "--workers",
    "2",
    "--set",
    "model.dropout=0.1",
    "--set",
    "run.log_every=1",
]
CHECKPOINT_STEPS = sorted({*range(3, STEPS + 1, 3), 20, 40})  # --ckpt-every-steps 3, and every evaluation
STEP_LINE = re.compile(r"step (\d+)/\d+ ")
PAUSING = Path(__file__).with_name("pause_checkpoint_write.py")
PAUSED = "paused writing checkpoint"  # what it says once half the checkpoint is on disk


@dataclass
class Session:
    returncode: int
    stderr: str
    last_step: int  # the last step the process reported finishing


def train(
    out: Path,
    *,
    stop_after: int | None = None,
    signum: int = signal.SIGKILL,
    pause_at: int | None = None,
    timeout: float = 120,
) -> Session:
    """Run `vitlab train` (resuming when `out` holds a run). After it reports step `stop_after`, or
    once it pauses in the checkpoint write of step `pause_at`, send `signum` to its process group
    (the main process and its data-loader workers, as a machine failure would)."""
    vitlab = [str(PAUSING), str(pause_at)] if pause_at else ["-m", "vitlab"]  # pause_checkpoint_write.py
    command = [sys.executable, *vitlab, "train", *FLAGS, "--out", str(out)]
    if (out / ckpt.FOLDER).is_dir():
        command.append("--resume")
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, start_new_session=True
    )
    watchdog = threading.Timer(timeout, os.killpg, (process.pid, signal.SIGKILL))
    watchdog.start()
    lines, last_step, sent = [], 0, False
    try:
        for line in process.stderr:
            lines.append(line)
            if match := STEP_LINE.match(line):
                last_step = int(match.group(1))
            due = (stop_after is not None and last_step >= stop_after) or (pause_at and PAUSED in line)
            if due and not sent:
                os.killpg(process.pid, signum) if signum == signal.SIGKILL else process.send_signal(signum)
                sent = True
        process.wait()
    finally:
        watchdog.cancel()
    return Session(process.returncode, "".join(lines), last_step)


@pytest.mark.fault("kill", kinds=3)
def test_sigkill_anywhere_then_resume_gives_bitwise_the_same_weights(tmp_path):
    seed = int(os.environ.get("VITLAB_FAULT_SEED", random.randrange(10**6)))
    print(f"VITLAB_FAULT_SEED={seed}")
    rng = random.Random(seed)
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert train(whole).returncode == 0

    # 1. SIGKILL at a random step (maybe before the first checkpoint: then the resume starts afresh).
    first = train(parts, stop_after=rng.randint(1, 12))
    assert first.returncode == -signal.SIGKILL, first.stderr

    # 2. SIGKILL half-way through writing a checkpoint: `latest` still names the previous one.
    resumed_from = _latest_step(parts)
    pause_at = rng.choice([s for s in CHECKPOINT_STEPS if resumed_from < s <= 30])
    during_write = train(parts, pause_at=pause_at)
    assert during_write.returncode == -signal.SIGKILL, during_write.stderr
    previous = max([s for s in CHECKPOINT_STEPS if resumed_from <= s < pause_at], default=resumed_from)
    assert during_write.last_step == pause_at and _latest_step(parts) == previous
    assert list((parts / ckpt.FOLDER).glob(f".{ckpt.checkpoint_name(pause_at)}{files.PARTIAL}*"))  # half-written
    ckpt.load_checkpoint(ckpt.latest_checkpoint(parts))  # the previous checkpoint is complete

    # 3. SIGTERM: the run finishes its step, writes a checkpoint and exits with 128 + 15.
    stop = rng.randint(pause_at + 1, 30)
    terminated = train(parts, stop_after=stop, signum=signal.SIGTERM)
    assert terminated.returncode == 143, terminated.stderr
    assert "stopped by SIGTERM" in terminated.stderr and _latest_step(parts) == terminated.last_step >= stop

    # 4. SIGKILL again, then run to the end.
    killed = train(parts, stop_after=rng.randint(terminated.last_step + 1, STEPS - 2))
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    final = train(parts)
    assert final.returncode == 0, final.stderr

    message = f"kill seed {seed}"
    a, b = load_file(whole / "model.safetensors"), load_file(parts / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), message
    assert_same_state(final_state(whole), final_state(parts))
    drop = {"images_per_s", "wall_time_s"}
    rows = [
        [{k: v for k, v in row.items() if k not in drop} for row in read_metrics(out / "metrics.jsonl")]
        for out in (whole, parts)
    ]
    assert rows[0] == rows[1] and [row["step"] for row in rows[0]] == [20, 40], message
    assert not list((parts / ckpt.FOLDER).glob(f".*{files.PARTIAL}*"))  # leftovers were cleaned up


def _latest_step(out: Path) -> int:
    latest = ckpt.latest_checkpoint(out)
    return int(ckpt.NAME.fullmatch(latest.name).group(1)) if latest else 0
