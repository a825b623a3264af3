"""`vitlab experiment compute` (Fig. 5): the FLOP total of every run against a hand-computed product,
data-scaling's runs reused, and the findings' compute ratio."""

from __future__ import annotations

import json

import pytest

from vitlab.bench.flops import model_flops
from vitlab.experiments import Settings, run_experiment
from vitlab.experiments.compute import budgets, findings, training_flops
from vitlab.experiments.runner import vit_config


@pytest.mark.unit
def test_training_flops_is_forward_times_three_times_images():
    assert training_flops(1_000, steps=30, batch_size=64) == 1_000 * 3 * 30 * 64
    assert budgets(300) == (30, 100, 300) and budgets(2) == (1, 2)


@pytest.mark.unit
def test_findings_ratio_of_compute_to_the_same_accuracy():
    def entry(model, steps, tflops, top1):
        return {"model": model, "steps": steps, "train_tflops": tflops, "val_top1": top1, "val_top1_std": 0.0}

    summary = [
        entry("ViT", 10, 1.0, 0.50),
        entry("ViT", 30, 3.0, 0.80),
        entry("BiT", 10, 1.0, 0.40),
        entry("BiT", 30, 3.0, 0.60),
        entry("BiT", 90, 9.0, 0.85),
        entry("hybrid", 10, 1.0, 0.55),
        entry("hybrid", 30, 3.0, 0.70),
    ]
    lines = findings(summary)
    # Target 80% (ViT's best, below BiT's): ViT reaches it at 3 TFLOPs, BiT at 9.
    assert "To reach 80.0%" in lines[0] and "ViT needed 3 TFLOPs and BiT 9" in lines[0]
    assert "3x less compute than BiT, the paper's direction" in lines[0]
    assert "hybrid's 55.0% is above ViT's 50.0%; the paper" in lines[1] and "70.0% is below ViT's 80.0%." in lines[2]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_compute_smallest_configuration_reuses_data_scaling_runs(tmp_path):
    settings = Settings(data="digits", out=tmp_path, budget_steps=2, seeds=(0,))
    run_experiment("compute", settings)
    document = json.loads((tmp_path / "compute.json").read_text())
    runs = {(row["model"], row["steps"]): row for row in document["runs"]}
    assert set(runs) == {(model, steps) for model in ("ViT", "BiT", "hybrid") for steps in (1, 2)}
    forward = model_flops(vit_config(settings).replace(num_classes=10))
    assert runs["ViT", 2]["train_tflops"] == pytest.approx(forward * 3 * 2 * 64 / 1e12)  # demo batch 64
    assert runs["ViT", 1]["images_seen"] == 64
    assert document["models"]["ViT"]["counted_backward_factor"] == pytest.approx(3, abs=0.2)
    # The largest budget's runs are data-scaling's (its tag for the whole set); the others their own.
    assert (tmp_path / "runs" / "ViT-1-seed0" / "summary.json").is_file()
    assert (tmp_path / "runs" / "BiT-steps1-seed0" / "summary.json").is_file()
    checkpoints = sorted((tmp_path / "runs" / "ViT-1-seed0" / "checkpoints").rglob("*"))
    written = {path: path.stat().st_mtime_ns for path in checkpoints}
    run_experiment("data-scaling", Settings(data="digits", out=tmp_path, budget_steps=2, seeds=(0,), fractions=(1.0,)))
    assert {path: path.stat().st_mtime_ns for path in checkpoints} == written  # reused, not retrained
    scaling = json.loads((tmp_path / "data-scaling.json").read_text())
    assert {row["model"]: row["val_top1"] for row in scaling["runs"]} == {
        model: runs[model, 2]["val_top1"] for model in ("ViT", "BiT", "hybrid")
    }
    assert "TFLOPs" in (tmp_path / "compute.md").read_text() and len(document["findings"]) == 3
