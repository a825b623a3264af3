"""The GPU check, run with --device cpu: every part a user with GPUs runs first goes through on CPUs
(gloo standing where nccl would), and a part that fails is named with its output."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from vitlab.bench import ddp
from vitlab.bench.gpu_check import main


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_gpu_check_runs_its_parts_on_cpus(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    parts = "setup,train,resume,predict,eval,export"
    assert main(["--device", "cpu", "--parts", parts, "--timeout", "400", "--out", str(tmp_path)]) == 0
    check = json.loads((tmp_path / "check.json").read_text())
    assert [part["part"] for part in check["parts"]] == parts.split(",")[1:]
    assert (tmp_path / "train" / "model.safetensors").is_file() and (tmp_path / "model.onnx").is_file()
    summary = (tmp_path / "summary.txt").read_text()
    assert "train: ok" in summary and "resume: ok" in summary and "export: ok" in summary


@pytest.mark.integration
def test_a_failing_part_is_named_with_its_output(tmp_path):
    assert main(["--device", "cpu", "--parts", "eval", "--timeout", "200", "--out", str(tmp_path)]) == 1
    summary = (tmp_path / "summary.txt").read_text()
    assert "eval: FAILED (exit status" in summary and str(tmp_path / "train") in summary  # no run to evaluate yet


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_one_process_under_torchrun_joins_its_launchers_store(tmp_path):
    # A lone process makes its own group; under torchrun it must use the launcher's store address, not
    # a fixed port where nothing listens (it waited out the 5-minute timeout, as the GPU check's ddp part
    # on one GPU did).
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]
    command += ["-m", "vitlab.bench.ddp", "--tiny", "--device", "cpu", "--steps", "1", "--out", str(tmp_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        status = subprocess.run(command, capture_output=True, timeout=120, env=env).returncode
    except subprocess.TimeoutExpired:
        pytest.fail("one process under torchrun hung making its group")
    assert status == 0 and json.loads((tmp_path / "ddp.json").read_text())["world_size"] == 1


@pytest.mark.unit
@pytest.mark.parametrize("device, current, chosen", [("cuda", 3, 3), ("cuda:1", 3, 1)])
def test_a_lone_cuda_process_sets_its_device_by_index(monkeypatch, device, current, chosen):
    # A stand-in for one GPU: torch's own set_device checks the argument, only the driver call is faked.
    # Given the index-less "cuda" it raised ValueError on the H200, the first time the bench ran there.
    calls = []
    monkeypatch.setattr(torch._C, "_cuda_setDevice", calls.append, raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
    monkeypatch.setattr(ddp.dist, "init_process_group", lambda backend, **_: calls.append(backend))
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_PORT", "40123")  # torchrun's store
    ddp.join_alone(torch.device(device))
    assert (
        calls == [chosen, "cpu:gloo,cuda:nccl"]
        and os.environ["MASTER_PORT"] == "40123"
        and os.environ["WORLD_SIZE"] == "1"
    )
