"""`torchrun --nproc_per_node=2 -m vitlab train` on CPU (gloo): DDP and FSDP2 give the weights of one
process on the same global batch, and their runs resume from their checkpoints."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vitlab.train import checkpoint as ckpt

# A few SGD steps of a tiny ViT on digits with a deterministic crop, so that the only difference
# between one process and two is the order of float sums. (Adam would turn the pure-noise gradient
# of the attention's key bias, zero in exact arithmetic, into lr-sized steps of either sign.)
FLAGS = [
    "train", "--recipe", "demo", "--model", "mu/4", "--image-size", "8", "--data", "digits",
    "--batch-size", "16", "--steps", "4", "--eval-every", "2", "--ckpt-every-steps", "2", "--keep-ckpts", "5",
    "--precision", "fp32", "--device", "cpu", "--workers", "0", "--threads", "1", "--lr", "0.1",
    "--set", "optim.name=sgd", "--set", "schedule.warmup_steps=1",
    "--set", "augment.crop_scale=[1.0,1.0]", "--set", "augment.crop_ratio=[1.0,1.0]",
]
pytestmark = pytest.mark.slow


def command_line(out: Path, *extra: str, processes: int = 1) -> list[str]:
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"] if processes > 1 else []
    return [sys.executable, *launcher, "-m", "vitlab", *FLAGS, "--out", str(out), *extra]


ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


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


def test_ddp_equals_one_process_and_resumes(single, tmp_path):
    run = tmp_path / "ddp"
    result = vitlab_train(run, processes=2)
    assert_close(weights(run), single, atol=1e-6)
    assert result.stdout.count("model folder:") == 1  # process 0 reports
    assert [p.name for p in ckpt.list_checkpoints(run)] == ["step-00000002.pt", "step-00000004.pt"]

    rewind(run, tmp_path / "resumed", step=2)
    resumed = vitlab_train(tmp_path / "resumed", "--resume", processes=2)
    assert "resuming" in resumed.stderr and "from step 2" in resumed.stderr
    assert_close(weights(tmp_path / "resumed"), weights(run), atol=1e-6)


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
    process = subprocess.Popen(command_line(stopped, *longer, processes=2), stderr=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, text=True, env=ENV)
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
