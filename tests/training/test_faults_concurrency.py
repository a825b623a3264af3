"""One run per output folder: a second run beside a live one is one line naming the holder's host
and PID, and a killed run leaves no stale lock."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from helpers import TINY_FLAGS, tiny_config
from vitlab.cli import main
from vitlab.model import ConfigError
from vitlab.runlock import HOLDER_FILE
from vitlab.training import Trainer

HOLD = (
    "import sys, time\nfrom vitlab.runlock import RunLock\nlock = RunLock(sys.argv[1])\nlock.acquire()\n"
    "print('held', flush=True)\ntime.sleep(120)\n"
)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.fault("concurrency", kinds=3)
def test_a_run_beside_a_live_one_is_refused_naming_it_and_a_killed_one_leaves_no_lock(tmp_path, capsys):
    Trainer(tiny_config(tmp_path, schedule={"steps": 2}, run={"eval_every": 2})).fit()
    metrics = (tmp_path / "metrics.jsonl").read_text()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        named = rf"in use by another run \(host {socket.gethostname()} PID {holder.pid} since .*\)"
        with pytest.raises(ConfigError, match=named):  # 1. a new run
            Trainer(tiny_config(tmp_path / "nested" / "..", schedule={"steps": 2}))
        # 2. --resume beside the live run: one line, and nothing written
        status = main(["train", *TINY_FLAGS, "--steps", "2", "--eval-every", "2", "--out", str(tmp_path), "--resume"])
        error = capsys.readouterr().err.strip().splitlines()
        assert status == 2 and len(error) == 1 and f"PID {holder.pid}" in error[0], error
        assert (tmp_path / "metrics.jsonl").read_text() == metrics
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # 3. the kernel frees a dead holder's lock
        holder.wait(timeout=30)
    assert (tmp_path / HOLDER_FILE).is_file()  # stale words, but no stale lock
    resumed = Trainer(tiny_config(tmp_path, schedule={"steps": 2}, run={"eval_every": 2, "resume": True}))
    assert resumed.step == 2
    assert f"PID {os.getpid()}" in (tmp_path / HOLDER_FILE).read_text()
    resumed.fit()
    assert not (tmp_path / HOLDER_FILE).exists()  # released at the end


@pytest.mark.integration
@pytest.mark.fault("concurrency", kinds=1)
def test_two_trainers_of_one_process_on_one_folder(tmp_path):
    first = Trainer(tiny_config(tmp_path, schedule={"steps": 2}, run={"eval_every": 2}))
    with pytest.raises(ConfigError, match=f"in use by another run .*PID {os.getpid()}"):
        Trainer(tiny_config(tmp_path, schedule={"steps": 2}, run={"resume": True}))
    first.fit()
    second = Trainer(tiny_config(tmp_path, schedule={"steps": 2}, run={"eval_every": 2, "resume": True}))
    assert second.step == 2
    second.close()
