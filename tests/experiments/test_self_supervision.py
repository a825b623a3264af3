"""`vitlab experiment self-supervision` (paper Sec. 4.6): masked patch pre-training vs scratch vs
supervised pre-training, each fine-tuned on a few labels; its smallest configuration and its findings."""

from __future__ import annotations

import json

import pytest
import yaml

from vitlab.cli import main
from vitlab.experiments import EXPERIMENTS
from vitlab.experiments.self_supervision import MASKED, SCRATCH, SUPERVISED, findings

PRETRAINING = {"steps": 5, "images": 100, "mpp_val_accuracy": 0.5, "supervised_val_top1": 0.9, "label_fraction": 0.05}


def entries(scratch: float, masked: float, supervised: float, std: float = 0.01) -> list[dict]:
    return [
        {"start": start, "val_top1": value, "val_top1_std": std}
        for start, value in ((SCRATCH, scratch), (MASKED, masked), (SUPERVISED, supervised))
    ]


@pytest.mark.unit
def test_the_findings_say_whether_the_papers_ordering_held():
    held = findings(entries(0.60, 0.70, 0.90), PRETRAINING, 10)
    assert held[1].endswith(
        "masked patch pre-training is 10.0 points above training from scratch (paper: 2 above) "
        "and 20.0 points below supervised pre-training (paper: 4 below)."
    )
    assert held[2] == "The paper's ordering (supervised > masked patch > scratch) held."
    broken = findings(entries(0.70, 0.60, 0.70, std=0.2), PRETRAINING, 10)
    assert "did not hold: measured from scratch = supervised pre-training > masked patch pre-training" in broken[2]
    assert "within the spread over seeds (20.0)" in broken[2]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_self_supervision_smallest_configuration(tmp_path):
    argv = ["experiment", "self-supervision", "--data", "digits", "--out", str(tmp_path), "--budget-steps", "2"]
    assert main([*argv, "--pretrain-steps", "2", "--seeds", "0", "--label-fraction", "0.1"]) == 0
    document = json.loads((tmp_path / "self-supervision.json").read_text())
    runs = document["runs"]
    assert [run["start"] for run in runs] == [SCRATCH, MASKED, SUPERVISED]
    assert {run["train_images"] for run in runs} == {142}  # a class-balanced 10% of digits' 1437, rounded per class
    pretraining = document["pretraining"]
    assert pretraining["images"] == 1437 and pretraining["steps"] == 2
    mpp = json.loads((tmp_path / "runs" / "pretrain-mpp" / "summary.json").read_text())
    assert mpp["objective"] == "mpp" and mpp["val_top1"] == pretraining["mpp_val_accuracy"]
    run_yaml = yaml.safe_load((tmp_path / "runs" / "finetune-masked-seed0" / "run.yaml").read_text())
    assert run_yaml["model"]["init"] == str(tmp_path / "runs" / "pretrain-mpp")
    assert run_yaml["objective"]["name"] == "classify" and run_yaml["data"]["train_fraction"] == 0.1
    report = (tmp_path / "self-supervision.md").read_text()
    assert "| masked patch pre-training | 142 |" in report and "79.9" in report and "83.9 (4 above)" in report
    assert "self-supervision" in EXPERIMENTS
