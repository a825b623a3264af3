"""`vitlab train --workers 2` ends with all its worker processes, however it ends: finished (also
from a script that still holds its Trainer at exit), failed, stopped by SIGTERM, or by Ctrl-C
(SIGINT to the whole process group, as a terminal sends it). The
image folder holds a broken link and a link loop, as the folder of a run that once hung at exit did."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import write_class_folders

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

STEP_LINE = re.compile(r"step (\d+)/\d+ ")
RUN_SECONDS = 120  # a run that has not ended by then hangs
GONE_SECONDS = 15  # how long the workers may outlive the main process


def image_folder(root: Path) -> Path:
    write_class_folders(root, {"a": 24, "b": 24})
    (root / "a" / "broken.png").symlink_to(root / "a" / "missing.png")
    (root / "b" / "loop").symlink_to(".")
    return root


def live_members(group: int) -> list[int]:
    """PIDs of the processes of a process group that have not ended (zombies count as ended)."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == group and fields[0] != "Z":
                members.append(int(entry.name))
    return members


# The same run from Python, the trainer still referenced when the interpreter exits.
SCRIPT = """import sys
from vitlab.training import Trainer, get_recipe
from vitlab.training.config import apply_mapping
settings = {"model": {"variant": "mu/4", "image_size": 8},
            "data": {"source": sys.argv[1], "batch_size": 8, "workers": 2, "max_bad_fraction": 0.1},
            "schedule": {"steps": 6, "warmup_steps": 1}, "run": {"eval_every": 3, "threads": 1, "out": sys.argv[2]}}
trainer = Trainer(apply_mapping(get_recipe("small-data"), settings, "test"))
trainer.fit()
"""


def train(
    data: Path, out: Path, stop: int | None = None, extra: tuple[str, ...] = (), script: bool = False
) -> tuple[int, str, list[int]]:
    """Run `vitlab train` (or SCRIPT) in a new process group; send `stop` after step 2. Returns the
    exit status, the log and the processes of its group still alive GONE_SECONDS after the main one ended."""
    command = [
        sys.executable,
        "-m",
        "vitlab",
        "train",
        "--recipe",
        "small-data",
        "--model",
        "mu/4",
        "--image-size",
        "8",
        "--data",
        str(data),
        "--batch-size",
        "8",
        "--steps",
        "6",
        "--eval-every",
        "3",
        "--threads",
        "1",
        "--workers",
        "2",
        "--set",
        "schedule.warmup_steps=1",
        "--set",
        "data.max_bad_fraction=0.1",
        "--set",
        "run.log_every=1",
        "--out",
        str(out),
        *extra,
    ]
    if script:
        command = [sys.executable, "-c", SCRIPT, str(data), str(out)]
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, start_new_session=True
    )
    watchdog = threading.Timer(RUN_SECONDS, os.killpg, (process.pid, signal.SIGKILL))
    watchdog.start()
    lines, sent = [], False
    try:
        for line in process.stderr:
            lines.append(line)
            match = STEP_LINE.match(line)
            if stop is not None and match and int(match.group(1)) >= 2 and not sent:
                process.send_signal(stop) if stop == signal.SIGTERM else os.killpg(process.pid, stop)
                sent = True
        process.wait()
    finally:
        hung = watchdog.finished.is_set()
        watchdog.cancel()
    deadline = time.monotonic() + GONE_SECONDS
    while (left := live_members(process.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if left:
        os.killpg(process.pid, signal.SIGKILL)
    log = "".join(lines)
    assert not hung, f"the run did not end within {RUN_SECONDS} s:\n{log[-2000:]}"
    return process.returncode, log, left


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the process group's members in /proc")
@pytest.mark.fault("exits", kinds=1)
@pytest.mark.parametrize("how", ["finished", "finished, trainer kept", "failed", "SIGTERM", "SIGINT"])
def test_workers_end_with_the_run(tmp_path, how):
    data = image_folder(tmp_path / "data")
    out = tmp_path / "run"
    if how == "failed":  # the first checkpoint cannot be written, after the workers have started
        out.mkdir()
        (out / "checkpoints").write_text("a file where the checkpoint folder goes")
    stop = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}.get(how)
    status, log, left = train(
        data, out, stop, ("--ckpt-every-steps", "1") if how == "failed" else (), script=how == "finished, trainer kept"
    )
    assert status == {"failed": 1, "SIGTERM": 143, "SIGINT": 130}.get(how, 0), log[-2000:]
    if stop is not None:
        assert f"stopped by {how}" in log, log[-2000:]
    assert not left, f"worker processes {left} outlived the run"
