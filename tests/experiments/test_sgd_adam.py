"""`vitlab experiment sgd-adam` (Table 7): the two pre-training optimisers as the paper sets them, one
fine-tuning recipe for both, and the findings' direction."""

from __future__ import annotations

import json

import pytest
import yaml

from vitlab.experiments import Settings, run_experiment
from vitlab.experiments.sgd_adam import TABLE_7, findings


@pytest.mark.unit
def test_findings_say_whether_adam_won():
    def entry(optimiser, top1):
        return {"optimiser": optimiser, "val_top1": top1, "val_top1_std": 0.01, "pretrain_top1": 0.5}

    adam_better = findings([entry("Adam", 0.9), entry("SGD", 0.8)], steps=100, pretrain_steps=150)
    assert "90.0%, above SGD's 80.0% (+10.0 points): as in the paper" in adam_better[0]
    sgd_better = findings([entry("Adam", 0.8), entry("SGD", 0.805)], steps=100, pretrain_steps=150)
    assert "below SGD's 80.5% (-0.5 points, within the spread over seeds): against the paper" in sgd_better[0]
    assert (
        "Adam 89.33% vs SGD 88.79%" in adam_better[1] and "Adam better on 4 of 5" in adam_better[1]
    )  # all but ImageNet
    assert TABLE_7["Average"] == (89.33, 88.79, 94.01, 93.72)
    datasets = [row for name, row in TABLE_7.items() if name != "Average"]
    for column, average in enumerate(TABLE_7["Average"]):  # a mistyped cell breaks its column's average
        assert round(sum(row[column] for row in datasets) / len(datasets), 2) == average


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sgd_adam_smallest_configuration(tmp_path):
    settings = Settings(
        data="digits",
        out=tmp_path,
        budget_steps=2,
        pretrain_steps=2,
        seeds=(0,),
        fractal_classes=3,
        fractal_per_class=30,
        fractal_size=16,
    )
    run_experiment("sgd-adam", settings)
    document = json.loads((tmp_path / "sgd-adam.json").read_text())
    assert [row["optimiser"] for row in document["runs"]] == ["Adam", "SGD"]
    runs = tmp_path / "runs"
    optim = {
        name: yaml.safe_load((runs / f"sgd-adam-pretrain-{name}-seed0" / "run.yaml").read_text())["optim"]
        for name in ("Adam", "SGD")
    }
    assert optim["Adam"]["name"] == "adamw" and optim["Adam"]["betas"] == [0.9, 0.999]
    assert optim["Adam"]["weight_decay"] == 0.1 and optim["Adam"]["lr"] == 1e-3  # Table 3, BiT-R50x1 on JFT
    assert optim["SGD"]["name"] == "sgd" and optim["SGD"]["momentum"] == 0.9 and optim["SGD"]["weight_decay"] == 1e-4
    finetune = [
        yaml.safe_load((runs / f"sgd-adam-finetune-{name}-seed0" / "run.yaml").read_text()) for name in ("Adam", "SGD")
    ]
    assert finetune[0]["optim"] == finetune[1]["optim"] and finetune[0]["optim"]["name"] == "sgd"
    assert finetune[0]["model"]["init"].endswith("sgd-adam-pretrain-Adam-seed0")
    assert finetune[1]["model"]["init"].endswith("sgd-adam-pretrain-SGD-seed0")
    table = (tmp_path / "sgd-adam.md").read_text()
    assert "| 89.33 |" in table and "| 88.79 |" in table and len(document["findings"]) == 3
    assert document["pretraining"]["classes"] == 3
