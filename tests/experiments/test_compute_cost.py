"""`vitlab experiment compute-cost` (Fig. 12): the largest-batch search against a known threshold, and
the smallest configuration end to end."""

from __future__ import annotations

import json

import pytest

from vitlab.accel import cpu
from vitlab.experiments import Settings, run_experiment
from vitlab.experiments.compute_cost import findings, largest_batch


@pytest.mark.unit
@pytest.mark.parametrize("threshold", [1, 2, 3, 37, 64, 65, 1000])
@pytest.mark.parametrize("fixed", [0, 5_000])
def test_largest_batch_finds_the_threshold_of_an_affine_peak(threshold, fixed):
    per_image = 1_000
    budget = fixed + threshold * per_image + per_image // 2  # batch `threshold` fits, one more does not
    calls = []

    def peak(batch: int) -> int:
        calls.append(batch)
        return fixed + batch * per_image

    found, probes = largest_batch(peak, budget)
    assert found == threshold
    assert probes[found] <= budget < probes[found + 1]  # both neighbours measured
    assert len(calls) == len(set(calls))  # no batch measured twice
    assert len(calls) <= threshold.bit_length() + 4  # doubling, then a few probes on the line


@pytest.mark.unit
def test_largest_batch_with_a_kinked_peak_none_and_nothing_fitting():
    threshold = 300

    def kinked(batch: int) -> int:  # far from a line: the midpoint steps must still close in
        return batch**3

    found, probes = largest_batch(kinked, threshold**3)
    assert found == threshold and (threshold + 1) in probes
    # None: the estimate ruled the batch out; it counts as not fitting.
    assert largest_batch(lambda b: None if b > 8 else b, budget=100)[0] == 8
    assert largest_batch(lambda b: 10 * b, budget=5) == (0, {1: 10})
    assert largest_batch(lambda b: 0, budget=5, ceiling=16)[0] == 16  # stops doubling at the ceiling


@pytest.mark.unit
def test_findings_compare_speed_and_batch_per_pair():
    summary = [
        {"model": "Ti/16", "image_size": 224, "images_per_s_per_core": 30.0, "max_batch": 100},
        {"model": "BiT-R26x1", "image_size": 224, "images_per_s_per_core": 10.0, "max_batch": 20},
    ]
    (line,) = findings(summary)
    assert "3.00x at 224 px (not within a factor 2" in line and "5.00x at 224 px" in line
    assert "the ViT fits the larger batch at every size" in line


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_compute_cost_smallest_configuration(tmp_path):
    settings = Settings(
        out=tmp_path, models=("Ti/16",), input_sizes=(64, 128), memory_budget_mib=4, rounds=1, seeds=(0,)
    )
    run_experiment("compute-cost", settings)
    document = json.loads((tmp_path / "compute-cost.json").read_text())
    table = (tmp_path / "compute-cost.md").read_text()
    assert (tmp_path / "compute-cost.png").stat().st_size > 5_000
    rows = {(row["model"], row["image_size"]): row for row in document["runs"]}
    assert set(rows) == {("Ti/16", 64), ("Ti/16", 128)}
    budget = 4 * 2**20
    for row in rows.values():
        assert row["images_per_s_per_core"] > 0
        probes = {int(b): p for b, p in row["probes"].items()}
        batch = row["max_batch"]
        assert batch >= 1 and probes[batch] <= budget < probes[batch + 1]
        assert f"| {row['model']} | {row['image_size']} |" in table
    # Four times the pixels: more memory per image, so a smaller batch fits.
    assert rows["Ti/16", 128]["max_batch"] < rows["Ti/16", 64]["max_batch"]
    assert rows["Ti/16", 128]["gflops"] > 3 * rows["Ti/16", 64]["gflops"]
    measured = document["measured"]
    assert measured["dtype"] == "fp32" and measured["threads"] >= 1 and measured["cpu_capability"]
    assert "No training" in table and document["findings"][0].startswith("Measured on")
    assert measured["cpu_model"] == cpu.cpu_model() and f"({cpu.cpu_model()})" in document["findings"][0]


@pytest.mark.unit
@pytest.mark.fault("bad-config", kinds=3)
def test_compute_cost_refuses_bad_settings(tmp_path):
    with pytest.raises(ValueError, match="--memory-budget-mib"):
        Settings(memory_budget_mib=0)
    with pytest.raises(ValueError, match="--input-sizes"):
        Settings(input_sizes=(224, 0))
    with pytest.raises(ValueError, match="--memory-budget-mib 1e.*twice it must fit"):
        run_experiment("compute-cost", Settings(out=tmp_path, memory_budget_mib=1e12))
