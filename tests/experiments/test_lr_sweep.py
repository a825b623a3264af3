"""`vitlab experiment lr-sweep`: Table 4's learning-rate grid picked on a dev split of the training set, then
the whole training set at the picked rate, tested (paper Appendix B.1.1), in its smallest configuration."""

from __future__ import annotations

import json

import pytest

from vitlab.cli import main
from vitlab.experiments import EXPERIMENTS, Settings


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_lr_sweep_picks_on_the_dev_split_and_tests_the_whole_training_set(tmp_path, capsys):
    argv = [
        "experiment",
        "lr-sweep",
        "--data",
        "digits",
        "--out",
        str(tmp_path),
        "--row",
        "pets",
        "--budget-steps",
        "2",
        "--seeds",
        "0",
    ]
    assert main(argv) == 0
    document = json.loads((tmp_path / "lr-sweep.json").read_text())
    assert document["grid"] == [0.001, 0.003, 0.01, 0.03] and document["dev_fraction"] == 0.1  # Table 4, B.1.1: Pets
    dev = [run for run in document["runs"] if run["split"] == "dev"]
    (test,) = [run for run in document["runs"] if run["split"] == "test"]
    assert [run["lr"] for run in dev] == [0.001, 0.003, 0.01, 0.03]
    assert {run["train_images"] for run in dev} == {1437 - 144}  # digits' 1437 less a 10% dev split
    best = max(dev, key=lambda run: (run["val_top1"], -run["lr"]))
    assert test["lr"] == best["lr"] == document["picked_lr"] and test["train_images"] == 1437
    summary = json.loads((tmp_path / "runs" / f"final-pets-lr{best['lr']:g}-seed0" / "summary.json").read_text())
    assert summary["val_top1"] == test["val_top1"] and summary["steps"] == 2
    dev_summary = json.loads((tmp_path / "runs" / "sweep-pets-lr0.01-seed0" / "summary.json").read_text())
    assert dev_summary["test_images"] == 360 and dev_summary["dev_images"] == 144
    assert "picked lr" in capsys.readouterr().out
    assert "lr-sweep" in EXPERIMENTS


@pytest.mark.unit
@pytest.mark.fault("bad-config", kinds=2)
def test_lr_sweep_refuses_an_unknown_row_and_a_grid_without_a_dev_split(tmp_path):
    with pytest.raises(ValueError, match="--row"):
        Settings(row="mnist")
    with pytest.raises(ValueError, match="one learning rate and no dev split"):
        EXPERIMENTS["lr-sweep"].run(Settings(out=tmp_path, row="vtab", lrs=(0.01, 0.03), budget_steps=1))
