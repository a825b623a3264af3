"""`torchrun --nproc_per_node=2 -m vitlab train` on CPU (gloo): DDP and FSDP2 give the weights of one
process on the same global batch, and their runs resume from their checkpoints."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import HAS_PROC, ListenerWatch, children, free_port
from vitlab.training import checkpoint as ckpt

# A few SGD steps of a tiny ViT on digits with a deterministic crop, so that the only difference
# between one process and two is the order of float sums. (Adam would turn the pure-noise gradient
# of the attention's key bias, zero in exact arithmetic, into lr-sized steps of either sign.)
FLAGS = [
    "train",
    "--recipe",
    "demo",
    "--model",
    "mu/4",
    "--image-size",
    "8",
    "--data",
    "digits",
    "--batch-size",
    "16",
    "--steps",
    "4",
    "--eval-every",
    "2",
    "--ckpt-every-steps",
    "2",
    "--keep-ckpts",
    "5",
    "--precision",
    "fp32",
    "--device",
    "cpu",
    "--workers",
    "0",
    "--threads",
    "1",
    "--lr",
    "0.1",
    "--set",
    "optim.name=sgd",
    "--set",
    "schedule.warmup_steps=1",
    "--set",
    "augment.crop_scale=[1.0,1.0]",
    "--set",
    "augment.crop_ratio=[1.0,1.0]",
]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def command_line(out: Path, *extra: str, processes: int = 1) -> list[str]:
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"] if processes > 1 else []
    return [sys.executable, *launcher, "-m", "vitlab", *FLAGS, "--out", str(out), *extra]


ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
LAUNCHER = Path(__file__).with_name("loopback_torchrun.py")


def vitlab_train(out: Path, *extra: str, processes: int = 1) -> subprocess.CompletedProcess:
    command = command_line(out, *extra, processes=processes)
    result = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "terminate called" not in result.stderr, result.stderr[-3000:]  # every process left the group cleanly
    return result


def weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(out / "model.safetensors")


def assert_close(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor], atol: float) -> None:
    assert first.keys() == second.keys()
    worst = max((first[name] - second[name]).abs().max().item() for name in first)
    assert worst <= atol, worst


def rewind(run: Path, copy: Path, step: int) -> None:
    """`copy` is `run` as it stood when the checkpoint of `step` was the latest (model folder not yet written)."""
    shutil.copytree(run, copy)
    for path in ckpt.list_checkpoints(copy):
        if int(ckpt.NAME.fullmatch(path.name).group(1)) > step:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    (copy / "model.safetensors").unlink()
    latest = next(p for p in ckpt.list_checkpoints(copy) if int(ckpt.NAME.fullmatch(p.name).group(1)) == step)
    (copy / ckpt.FOLDER / ckpt.LATEST).write_text(f"{latest.name}\n")


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> dict[str, torch.Tensor]:
    out = tmp_path_factory.mktemp("single") / "run"
    vitlab_train(out)
    return weights(out)


@pytest.fixture(scope="module")
def ddp(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """The uninterrupted run on one node with two processes: its folder and its output."""
    run = tmp_path_factory.mktemp("ddp") / "run"
    return run, vitlab_train(run, processes=2)


def test_ddp_equals_one_process_and_resumes(single, ddp, tmp_path):
    run, result = ddp
    assert_close(weights(run), single, atol=1e-6)
    assert result.stdout.count("model folder:") == 1  # process 0 reports
    assert [p.name for p in ckpt.list_checkpoints(run)] == ["step-00000002.pt", "step-00000004.pt"]

    rewind(run, tmp_path / "resumed", step=2)
    resumed = vitlab_train(tmp_path / "resumed", "--resume", processes=2)
    assert "resuming" in resumed.stderr and "from step 2" in resumed.stderr
    assert_close(weights(tmp_path / "resumed"), weights(run), atol=1e-6)


def test_ddp_keeps_the_best_weights_as_one_process(tmp_path):
    """run.keep_best under torchrun: every process holds the best-model tracker (best.py) and ends with
    the best evaluation's weights, which process 0 writes; they are one process's."""
    best = ["--set", "run.keep_best=true", "--set", "optim.lr=1.0"]  # a rate at which the last is not the best
    vitlab_train(tmp_path / "one", *best)
    vitlab_train(tmp_path / "two", *best, processes=2)
    summaries = [json.loads((tmp_path / run / "summary.json").read_text()) for run in ("one", "two")]
    assert summaries[0]["best_step"] == summaries[1]["best_step"] < 4, summaries
    assert_close(weights(tmp_path / "two"), weights(tmp_path / "one"), atol=1e-6)


def test_fsdp_equals_one_process_and_resumes_on_another_process_count(single, tmp_path):
    run = tmp_path / "fsdp"
    vitlab_train(run, "--data-parallel", "fsdp", processes=2)
    assert_close(weights(run), single, atol=1e-6)
    shards = ckpt.latest_checkpoint(run)
    assert shards.is_dir() and (shards / ckpt.SHARDED_STATE).is_file()
    assert len(list(shards.glob("*.distcp"))) == 2  # one file of shards per process

    rewind(run, tmp_path / "resumed", step=2)
    resumed = vitlab_train(tmp_path / "resumed", "--data-parallel", "fsdp", "--resume")  # 1 process now
    assert "from step 2" in resumed.stderr
    assert_close(weights(tmp_path / "resumed"), weights(run), atol=1e-6)


def test_sigterm_to_torchrun_checkpoints_every_process_and_resumes_exactly(tmp_path):
    """SIGTERM to torchrun (a scheduler's pre-emption) reaches every process; they finish the step,
    process 0 writes one checkpoint that all wait for, and a resumed run ends with the weights of the
    run that was never stopped."""
    longer = ["--steps", "40", "--eval-every", "40", "--ckpt-every-steps", "100", "--set", "run.log_every=1"]
    vitlab_train(tmp_path / "whole", *longer, processes=2)

    stopped = tmp_path / "stopped"
    process = subprocess.Popen(
        command_line(stopped, *longer, processes=2),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=ENV,
    )
    lines = []
    try:
        for line in process.stderr:
            lines.append(line)
            if re.match(r"step 3/40 ", line) and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    finally:
        process.kill()
    log = "".join(lines)
    assert process.returncode != 0, log[-3000:]
    assert "stopped by SIGTERM" in log and "terminate called" not in log, log[-3000:]
    [checkpoint] = ckpt.list_checkpoints(stopped)  # only the one the stop wrote
    assert 3 <= int(ckpt.NAME.fullmatch(checkpoint.name).group(1)) < 40, checkpoint.name

    resumed = vitlab_train(stopped, *longer, "--resume", processes=2)
    assert "resuming" in resumed.stderr
    assert_close(weights(stopped), weights(tmp_path / "whole"), atol=0.0)


# -- faults and topologies: torchrun restarts, two nodes -------------------------------------------------
# Every address on loopback: the rendezvous endpoint, the address the launchers give the workers
# (--local-addr), gloo's interface, and the stores' listening sockets (loopback_torchrun.py).
LOOPBACK_ENV = {**ENV, "GLOO_SOCKET_IFNAME": "lo"}
LOOPBACK = {"127.0.0.1", "::1"}
needs_proc = pytest.mark.skipif(not HAS_PROC, reason="watches torchrun's processes through Linux's /proc")


def torchrun(out: Path, *options: str, port: int | None = None) -> list[str]:
    """`torchrun OPTIONS -m vitlab train` with a c10d rendezvous on 127.0.0.1."""
    rendezvous = ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port or free_port()}", "--local-addr=127.0.0.1"]
    return [sys.executable, str(LAUNCHER), *options, *rendezvous, "-m", "vitlab", *FLAGS, "--out", str(out)]


def start(command: list[str]) -> subprocess.Popen:
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=LOOPBACK_ENV)


def finish(process: subprocess.Popen, timeout: float = 300) -> str:
    try:
        log, _ = process.communicate(timeout=timeout)
    finally:
        process.kill()
    assert process.returncode == 0, log[-3000:]
    assert "terminate called" not in log, log[-3000:]
    return log


def assert_loopback_only(watch: ListenerWatch) -> None:
    assert watch.seen, "no listening socket was seen"
    assert {host for host, _ in watch.seen} <= LOOPBACK, sorted(watch.seen)


@needs_proc
@pytest.mark.fault("distributed", kinds=1)
def test_a_killed_worker_is_restarted_by_torchrun_and_resumes_exactly(ddp, tmp_path):
    """SIGKILL to one worker mid-run: torchrun (--max-restarts=1) stops the other and starts both again;
    they resume from the latest checkpoint without --resume and end with the uninterrupted weights."""
    out = tmp_path / "killed"
    process = start(
        [*torchrun(out, "--nnodes=1", "--nproc-per-node=2", "--max-restarts=1"), "--set", "run.log_every=1"]
    )
    lines, killed = [], None
    watchdog = threading.Timer(300, process.kill)  # a hung run fails the test instead of stalling it
    watchdog.start()
    try:
        for line in process.stdout:
            lines.append(line)
            if killed is None and re.match(r"step 3/4 ", line):  # after the checkpoint of step 2
                killed = children(process.pid)[0]  # process 0, the one that writes the checkpoints
                os.kill(killed, signal.SIGKILL)
            if "torchrun restart 1" in line:
                break
        lines.append(finish(process))
    finally:
        watchdog.cancel()
        process.kill()
    log = "".join(lines)
    assert killed is not None, log[-3000:]
    assert re.search(r"torchrun restart 1: resuming .* from its latest checkpoint without --resume", log), log[-3000:]
    # Step 2's checkpoint, or step 4's when the kill came while it was being written.
    assert re.search(r"resuming .* from step (2|4) ", log), log[-3000:]
    assert_close(weights(out), weights(ddp[0]), atol=0.0)


@needs_proc
@pytest.mark.fault("distributed", kinds=1)
def test_two_nodes_of_one_process_train_as_one_node_of_two_on_loopback_only(ddp, tmp_path):
    """Two torchrun launchers (--nnodes=2, one process each) meet at a c10d rendezvous on 127.0.0.1; no
    process of the run listens on any other address."""
    out, port = tmp_path / "nodes", free_port()
    launchers = [
        start(torchrun(out, "--nnodes=2", f"--node-rank={rank}", "--nproc-per-node=1", port=port)) for rank in (0, 1)
    ]
    try:
        with ListenerWatch([launcher.pid for launcher in launchers]) as watch:
            logs = [finish(launcher) for launcher in launchers]
    finally:
        for launcher in launchers:  # a failed first launcher leaves the second waiting at the rendezvous
            launcher.kill()
    assert sum(log.count("model folder:") for log in logs) == 1  # one process 0 over both nodes
    assert ("127.0.0.1", port) in watch.seen  # the rendezvous store, seen while it ran
    assert_loopback_only(watch)
    assert_close(weights(out), weights(ddp[0]), atol=0.0)


def read_lines(process: subprocess.Popen, lines: list[str]) -> threading.Thread:
    """A thread that appends the process's output lines to `lines` as they come."""
    thread = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True)
    thread.start()
    return thread


@needs_proc
@pytest.mark.timeout(900)
@pytest.mark.fault("distributed", kinds=1)
def test_two_nodes_restart_together_after_a_worker_is_killed_and_resume_exactly(ddp, tmp_path):
    """Two launchers (--nnodes=2, one process each, --max-restarts=1); the worker of the node without
    process 0 is SIGKILLed after step 2's checkpoint. Its launcher restarts it, the other node's starts
    its worker again for the new round without counting a restart of its own; both resume from step 2
    (or 4) and the run ends bitwise equal to the uninterrupted one."""
    out, port = tmp_path / "nodes", free_port()
    options = ["--nnodes=2", "--nproc-per-node=1", "--max-restarts=1", "--monitor-interval=0.5"]
    launchers = [start([*torchrun(out, *options, port=port), "--set", "run.log_every=1"]) for _ in range(2)]
    logs: list[list[str]] = [[], []]
    readers = [read_lines(launcher, log) for launcher, log in zip(launchers, logs)]
    watchdog = [threading.Timer(400, launcher.kill) for launcher in launchers]  # a hung run fails the test
    killed = None
    try:
        for timer in watchdog:
            timer.start()
        while killed is None and all(launcher.poll() is None for launcher in launchers):
            main = next((i for i, log in enumerate(logs) if any(re.match(r"step 3/4 ", line) for line in log)), None)
            if main is not None:
                killed = children(launchers[1 - main].pid)[0]  # the worker of the node without process 0
                os.kill(killed, signal.SIGKILL)
            threading.Event().wait(0.05)
        for launcher, reader in zip(launchers, readers):
            launcher.wait(timeout=400)
            reader.join(10)
    finally:
        for timer in watchdog:
            timer.cancel()
        for launcher in launchers:
            launcher.kill()
    text = ["".join(log) for log in logs]
    assert killed is not None, text[0][-2000:] + text[1][-2000:]
    assert [launcher.returncode for launcher in launchers] == [0, 0], text[0][-3000:] + text[1][-3000:]
    both = text[0] + text[1]
    assert "already holds a run" not in both and "terminate called" not in both
    assert re.search(r"torchrun restart \d: resuming .* from its latest checkpoint without --resume", both), both[
        -3000:
    ]
    assert re.search(r"resuming .* from step (2|4) ", both), both[-3000:]
    assert_close(weights(out), weights(ddp[0]), atol=0.0)


@needs_proc
@pytest.mark.fault("distributed", kinds=1)
def test_two_nodes_with_a_run_folder_each_are_refused_in_one_line(tmp_path):
    port = free_port()
    launchers = [
        start(torchrun(tmp_path / f"node-{node}", "--nnodes=2", "--nproc-per-node=1", port=port)) for node in (0, 1)
    ]
    try:
        logs = [launcher.communicate(timeout=300)[0] for launcher in launchers]
    finally:
        for launcher in launchers:
            launcher.kill()
    assert all(launcher.returncode != 0 for launcher in launchers)
    refusals = [line for log in logs for line in log.splitlines() if "does not see the run folder" in line]
    assert refusals and all("every node needs --out on storage they all share" in line for line in refusals)
    assert not any(re.search(r'File ".*/vitlab/', log) for log in logs), logs[0][-3000:]  # no worker traceback
