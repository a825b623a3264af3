"""Two processes training in the process group a GPU run joins, gloo standing in for nccl
(stand_in_run.py): a step, an evaluation and a checkpoint go through; each process draws its own
stochastic depth; gradients are reduced once per step; evaluation is shared out and adds up to one
process's; FSDP gathers bf16 parameters under --precision bf16."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vitlab.training import checkpoint as ckpt

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
SCRIPT = Path(__file__).with_name("stand_in_run.py")


def run(out: Path, strategy: str) -> list[dict]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [*command, str(SCRIPT), str(out), strategy], capture_output=True, text=True, env=env, timeout=600
    )
    worker_lines = "\n".join(line for line in result.stderr.splitlines() if line.startswith("[rank"))
    assert result.returncode == 0, worker_lines[-6000:] or result.stderr[-3000:]
    return [json.loads((out / f"rank-{rank}.json").read_text()) for rank in (0, 1)]


@pytest.fixture(scope="module")
def ddp(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("ddp")
    return out, run(out, "ddp")


@pytest.fixture(scope="module")
def fsdp(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("fsdp")
    return out, run(out, "fsdp")


def test_a_step_an_evaluation_and_a_checkpoint_run_in_the_group_of_a_gpu_run(ddp):
    out, ranks = ddp
    assert "nccl" in ranks[0]["backend"]  # the group a GPU run joins, gloo standing in for its nccl
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(out / "run"))
    assert state["step"] == 2 and (out / "run" / "model.safetensors").is_file()
    [other] = state["process_rng"]  # process 1's generators, beside process 0's
    assert not torch.equal(other["torch"], state["rng"]["torch"])


def test_each_process_draws_its_own_stochastic_depth(ddp):
    _, (first, second) = ddp
    assert len(first["masks"]) == len(second["masks"]) > 0
    assert first["masks"] != second["masks"]
    kept = [bit for masks in first["masks"] for bit in masks]
    assert 0.2 < sum(kept) / len(kept) < 0.8  # drop_path 0.5: each sample's branch kept about half the time


def test_gradients_are_reduced_once_per_step_in_its_last_micro_batch(ddp, fsdp):
    for _, ranks in (ddp, fsdp):
        for record in ranks:
            reductions = record["reductions"]  # the micro-batch (0, 1, ... over the run) of each reduction
            assert reductions and {index % 4 for index in reductions} == {3}, reductions
            assert {index // 4 for index in reductions} == {0, 1}  # both steps, --grad-accum 4


def test_sharded_evaluation_equals_one_process_on_an_uneven_split(ddp):
    _, ranks = ddp
    assert ranks[0]["val_images"] % 16 == 1  # the last batch: one image, for process 0 only
    assert [sum(record["scored"]) for record in ranks] == [89, 88]  # each process scored its share
    assert ranks[1]["scored"][-1] == 0  # and an empty batch where its share of the last one is empty
    sharded, single = ranks[0]["sharded"], ranks[0]["single"]
    assert ranks[1]["sharded"] == sharded  # every process has the whole result
    assert (sharded["val_top1"], sharded["val_top5"]) == (single["val_top1"], single["val_top5"])
    assert sharded["val_loss"] == pytest.approx(single["val_loss"], rel=1e-6)


def test_fsdp_gathers_bf16_parameters_and_evaluates_an_uneven_split(fsdp):
    _, ranks = fsdp
    for record in ranks:
        assert set(record["forward_dtypes"]) == {"torch.bfloat16"}
    assert ranks[0]["sharded"] == ranks[1]["sharded"]  # process 1 ran an empty last batch to gather with 0
