"""The end-to-end prediction benchmark's smallest run: both pipelines over the same few JPEGs, every
file predicted in every pass, and the JSON the bench document is assembled from."""

from __future__ import annotations

import json

import pytest

from vitlab.bench.pipeline import PipelineConfig, markdown, run_pipeline

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_the_smallest_run(tmp_path):
    config = PipelineConfig(files=6, variant="mu/8", image_size=32, batch=4, workers=0, precision="fp32", rounds=1)
    results = run_pipeline(config, tmp_path)
    assert json.loads((tmp_path / "pipeline.json").read_text()) == results
    assert results["kind"] == "predict-pipeline" and results["machine"]["cpu_capability"]
    rows = {row["implementation"]: row for row in results["rows"]}
    assert set(rows) == {"vitlab", "timm"}
    for row in rows.values():
        assert row["images_per_s"] > 0 and row["peak_rss_mib"] > 50 and len(row["rounds_s"]) == 1
        assert set(row["stages_ms"]) == {"decode", "resize", "normalise", "model_and_topk"}
    assert results["vitlab_over_timm"] == pytest.approx(rows["vitlab"]["images_per_s"] / rows["timm"]["images_per_s"])
    assert results["markdown"] == (tmp_path / "pipeline.md").read_text() == markdown(results)
    verdict = "reached" if results["target_reached"] else "NOT reached"
    assert f"target 1.3x {verdict}" in results["markdown"] and "| timm | fp32, eager |" in results["markdown"]
