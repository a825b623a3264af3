"""The training input pipeline benchmark (vitlab against timm per core), at its smallest."""

from __future__ import annotations

import json

import pytest

from vitlab.bench.feeding import gpu_feed_line
from vitlab.bench.input_pipeline import KIND, PipelineConfig, run_pipeline_bench
from vitlab.cli import main as cli_main

SMALLEST = dict(image_size=32, images=8, classes=2, batch=4, batches_per_round=1, rounds=1, profile_images=2)


@pytest.fixture(scope="module")
def smallest(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-input")
    return run_pipeline_bench(PipelineConfig(**SMALLEST, benchmarks=str(out / "none")), out), out


@pytest.mark.unit
def test_smallest_run_measures_both_sides_and_renders_the_section(smallest):
    results, out = smallest
    assert results["kind"] == KIND and results["machine"]["cpu_capability"]
    assert len(list((out / "images").rglob("*.jpg"))) == 8
    per_core = results["images_per_s_per_core"]
    for name in ("vitlab", "timm", "vitlab with mixing", "timm with mixing"):
        assert per_core[name] > 0, name
    assert results["vitlab_over_timm"] == pytest.approx(per_core["vitlab"] / per_core["timm"])
    assert results["timm_settings"]["auto_augment"] == "rand-m10-n2"  # small-data's RandAugment (2, 10)
    stages = results["profile_ms_per_image"]
    assert {"decode", "RandomResizedCrop", "RandAugment", "ToNormalized"} <= set(stages["vitlab"])
    assert {"decode", "RandAugment", "Normalize"} <= set(stages["timm"])
    assert all(ms > 0 for ms in stages["vitlab"].values())
    operations = results["randaugment_ms_per_op"]
    assert len(operations) == 15 and all(ms["vitlab"] > 0 and ms["timm"] > 0 for ms in operations.values())
    assert f"| Rotate | {operations['Rotate']['vitlab']:.3f} |" in results["markdown"]
    assert f"| vitlab | {per_core['vitlab']:.1f} | {results['vitlab_over_timm']:.2f}x" in results["markdown"]
    assert "not reported until the GPU bench" in results["markdown"]
    # the settings table pairs each setting with timm's, with the run's values on both sides
    assert (
        "| crop_scale=(0.35, 1.0), crop_ratio=(0.75, 1.33) | scale=(0.35, 1.0), ratio=(0.75, 1.33) |"
        in results["markdown"]
    )
    assert (
        "fill (128, 128, 128) | auto_augment='rand-m10-n2' (fill: round(255 x mean) = (128, 128, 128))"
        in results["markdown"]
    )


@pytest.mark.unit
def test_cores_to_feed_the_gpu_come_from_a_measured_gpu_bench(tmp_path):
    assert "not reported" in gpu_feed_line(tmp_path, 100.0)
    other = {"machine": {"gpu": "H200"}, "cases": [{"variant": "B/16", "image_size": 224, "task": "infer"}]}
    (tmp_path / "a.json").write_text(json.dumps(other))  # no training step: still not reported
    (tmp_path / "b.json").write_text("not json")
    assert "not reported" in gpu_feed_line(tmp_path, 100.0)
    step = {
        "variant": "B/16",
        "image_size": 224,
        "task": "train",
        "rows": [{"implementation": "vitlab", "images_per_s": 1234.0}],
    }
    (tmp_path / "c.json").write_text(json.dumps({"machine": {"gpu": "H200"}, "cases": [step]}))
    line = gpu_feed_line(tmp_path, 100.0)
    assert "1,234 images/s" in line and "takes 13 cores" in line and "(12.3)" in line


@pytest.mark.unit
@pytest.mark.fault("bad-input", kinds=1)
@pytest.mark.parametrize(
    "options, culprit", [({"images": 2}, "images"), ({"rounds": 0}, "rounds"), ({"workers": -1}, "workers")]
)
def test_bad_sizes_are_refused_naming_the_field(options, culprit):
    with pytest.raises(ValueError, match=culprit):
        PipelineConfig(**{**SMALLEST, **options})


@pytest.mark.unit
def test_cli_hook_writes_json_with_the_doc_keys(tmp_path, capsys, monkeypatch):
    import vitlab.bench.input_pipeline as module

    monkeypatch.setattr(module, "PipelineConfig", lambda **options: PipelineConfig(**{**options, **SMALLEST}))
    assert cli_main(["bench", "--pipeline", "train-input", "--rounds", "1", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "train-input.json").read_text())
    assert {"kind", "machine", "markdown"} <= set(results)
    assert (tmp_path / "train-input.md").read_text() == results["markdown"]
    assert "vitlab / timm" in capsys.readouterr().out


@pytest.mark.unit
@pytest.mark.fault("bad-input", kinds=1)
def test_cli_refuses_cases_with_a_pipeline_in_one_line(tmp_path, capsys):
    assert cli_main(["bench", "Ti/16:infer:fp32", "--pipeline", "train-input", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not the CASEs Ti/16:infer:fp32" in err
    assert not (tmp_path / "train-input.json").exists()


@pytest.mark.integration
def test_with_a_worker_process_the_loaders_run_there(tmp_path):
    results = run_pipeline_bench(
        PipelineConfig(**{**SMALLEST, "workers": 1}, benchmarks=str(tmp_path / "none")), tmp_path
    )
    assert results["images_per_s_per_core"]["vitlab"] == results["images_per_s"]["vitlab"] > 0
    assert "in 1 worker process;" in results["markdown"]
