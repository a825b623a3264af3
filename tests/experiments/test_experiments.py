"""The paper's comparisons in miniature: each experiment end to end on a tiny budget (digits), and
the pieces they stand on (data fractions, matched FLOPs, BiT folders, the report)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from vitlab.accel.cpu import cpu_model
from vitlab.cli import main
from vitlab.data.datasets import ArrayImages
from vitlab.data.splits import take_fraction
from vitlab.experiments import EXPERIMENTS, Settings, run_experiment
from vitlab.experiments.runner import Results, bit_config, describe_model, hybrid_config, vit_config
from vitlab.model import ConfigError, create_untrained
from vitlab.training import Trainer, get_recipe
from vitlab.weights import load, save_pretrained

TINY = dict(data="digits", budget_steps=2, seeds=(0,))


def check_report(out, name: str, rows: int, metrics: tuple[str, ...]) -> dict:
    """Every output written; the JSON summary has `rows` rows with accuracies in [0, 1], each in the table."""
    document = json.loads((out / f"{name}.json").read_text())
    table = (out / f"{name}.md").read_text()
    assert (out / f"{name}.png").stat().st_size > 5_000
    assert len(document["summary"]) == rows
    for entry in document["summary"]:
        for metric in metrics:
            assert 0.0 <= entry[metric] <= 1.0, (metric, entry)
            assert f"| {100 * entry[metric]:.1f} |" in table or f"| {100 * entry[metric]:.1f} ±" in table
    assert table.count("\n| ") >= rows + 1  # header and one line per configuration
    assert document["budget"] == {"steps_per_run": 2, "seeds": [0]}
    assert document["command"].startswith(f"vitlab experiment {name} --data digits --out {out}")
    machine = document["machine"]
    assert machine["commit"] and machine["torch"] == torch.__version__
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine["cpu_model"] == cpu_model()  # vendor, family and model: what tells two machines apart
    assert (
        f"Commit `{machine['commit']}`, torch {machine['torch']}, {machine['cpu']} ({machine['cpu_model']}), "
        f"CPU capability {machine['cpu_capability']}" in table
    )
    return document


# -- the pieces ------------------------------------------------------------------------------------
@pytest.mark.unit
def test_take_fraction_is_class_balanced_nested_and_seeded():
    labels = np.repeat(np.arange(4), [10, 20, 30, 40])
    data = ArrayImages(np.zeros((100, 2, 2, 3), np.uint8), labels)
    quarter, half = take_fraction(data, 0.25, seed=3), take_fraction(data, 0.5, seed=3)
    assert np.bincount(quarter.labels).tolist() == [2, 5, 8, 10]  # round(0.25 n) per class
    assert np.bincount(half.labels).tolist() == [5, 10, 15, 20]
    as_rows = lambda subset: {tuple(row) for row in zip(subset.labels, subset.images[:, 0, 0, 0])}  # noqa: E731
    tagged = ArrayImages(
        np.arange(100, dtype=np.uint8)[:, None, None, None].repeat(2, 1).repeat(2, 2).repeat(3, 3), labels
    )
    assert as_rows(take_fraction(tagged, 0.25, 3)) <= as_rows(take_fraction(tagged, 0.5, 3))  # nested
    assert as_rows(take_fraction(tagged, 0.25, 3)) != as_rows(take_fraction(tagged, 0.25, 4))
    assert take_fraction(data, 1.0, 0).labels == data.labels
    with pytest.raises(ValueError, match="fraction"):
        take_fraction(data, 0.0, 0)


@pytest.mark.unit
def test_compared_models_have_matched_compute():
    settings = Settings()
    described = {
        label: describe_model(make(settings))
        for label, make in (("ViT", vit_config), ("BiT", bit_config), ("hybrid", hybrid_config))
    }
    flops = [d["mflops"] for d in described.values()]
    assert max(flops) / min(flops) < 1.2, described
    assert described["hybrid"]["architecture"].startswith("ResNet units (1, 1, 1)")
    # A hybrid with patch size 1 on the stride-4 backbone has as many tokens as ViT/4.
    assert hybrid_config(settings).grid_size == vit_config(settings).grid_size == (4, 4)


@pytest.mark.unit
def test_bit_resnet_folder_round_trip(tmp_path):
    model = create_untrained(bit_config(Settings()).replace(num_classes=3, class_names=["a", "b", "c"])).eval()
    torch.nn.init.normal_(model.head.weight)
    save_pretrained(model, tmp_path / "bit", training={"val_top1": 0.5, "data": "digits"})
    loaded = load(tmp_path / "bit")
    images = torch.randn(2, 3, 16, 16)
    assert type(loaded) is type(model) and loaded.config == model.config
    torch.testing.assert_close(loaded(images), model(images))
    assert "BiT ResNet" in (tmp_path / "bit" / "README.md").read_text()


@pytest.mark.unit
def test_trainer_refuses_architecture_and_init_together(tmp_path):
    config = get_recipe("demo")
    config.run.out, config.model.init = str(tmp_path), str(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="model.init"):
        Trainer(config, architecture=vit_config(Settings()))


@pytest.mark.unit
def test_results_summary_averages_over_seeds():
    rows = [{"pool": "GAP", "lr": 0.001, "seed": s, "val_top1": v} for s, v in ((0, 0.5), (1, 0.7))]
    (entry,) = Results(rows, group_by=("pool", "lr"), metrics=("val_top1",)).summary()
    assert entry["val_top1"] == pytest.approx(0.6) and entry["val_top1_std"] == pytest.approx(0.1)
    assert entry["seeds"] == [0, 1]


@pytest.mark.unit
def test_settings_command_and_bad_values(tmp_path):
    settings = Settings(data="digits", out=tmp_path, budget_steps=50, seeds=(0, 1), fractions=(0.5, 1.0), lrs=(1e-3,))
    command = settings.command(EXPERIMENTS["data-scaling"])
    assert (
        command
        == f"vitlab experiment data-scaling --data digits --out {tmp_path} --budget-steps 50 --seeds 0 1 --fractions 0.5 1.0"
    )
    assert "--fractions" not in settings.command(EXPERIMENTS["pooling"])
    with pytest.raises(ValueError, match="--fractions"):
        Settings(fractions=(0.0, 1.0))
    with pytest.raises(ValueError, match="--budget-steps"):
        Settings(budget_steps=0)


# -- each experiment end to end ----------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_data_scaling_end_to_end(tmp_path):
    results, _ = run_experiment("data-scaling", Settings(out=tmp_path, fractions=(0.1, 1.0), **TINY))
    document = check_report(tmp_path, "data-scaling", rows=6, metrics=("val_top1",))
    sizes = {(e["model"], e["fraction"]): e["train_images"] for e in document["summary"]}
    assert sizes["ViT", 0.1] == sizes["BiT", 0.1] == 142 and sizes["hybrid", 1.0] == 1437  # digits: 1437 to train
    assert set(document["models"]) == {"ViT", "BiT", "hybrid"}
    assert all(m["mflops"] > 0 for m in document["models"].values())
    assert len(results.findings) == 3


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_posemb_end_to_end(tmp_path):
    """Every row and column of Table 8, and the two kinds outside it."""
    run_experiment("posemb", Settings(out=tmp_path, **TINY))
    shots = ("fewshot_1", "fewshot_5", "fewshot_10", "fewshot_25")
    document = check_report(tmp_path, "posemb", rows=10, metrics=("val_top1", *shots))
    configs = [(e["pos_embed"], e["added"], e["paper_fewshot_5"]) for e in document["summary"]]
    assert configs == [
        ("none", "n/a", "61.4"),
        ("1-D (learned)", "input", "64.2"),
        ("1-D (learned)", "every layer", "64.0"),
        ("1-D (learned)", "every layer, shared", "64.3"),
        ("2-D (learned)", "input", "64.0"),
        ("2-D (learned)", "every layer", "64.0"),
        ("2-D (learned)", "every layer, shared", "64.0"),
        ("relative (1-D attention)", "attention logits, every layer", "64.0"),
        ("sin-cos (not in Table 8)", "input", ""),
        ("2-D relative bias (not in Table 8)", "attention logits, every layer", ""),
    ]
    architectures = {
        name: json.loads((tmp_path / "runs" / name / "config.json").read_text())["architecture"]
        for name in ("posemb-learned-every_layer-seed0", "posemb-relative-seed0")
    }
    assert architectures["posemb-learned-every_layer-seed0"]["pos_embed_at"] == "every_layer"
    assert architectures["posemb-relative-seed0"]["pos_embed"] == "relative"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_pooling_end_to_end_through_the_cli(tmp_path, capsys):
    argv = [
        "experiment",
        "pooling",
        "--data",
        "digits",
        "--out",
        str(tmp_path),
        "--budget-steps",
        "2",
        "--seeds",
        "0",
        "--lrs",
        "1e-3",
        "1e-2",
    ]
    assert main(argv) == 0
    assert "class token minus GAP" in capsys.readouterr().out
    document = check_report(tmp_path, "pooling", rows=4, metrics=("val_top1",))
    assert {(e["pool"], e["lr"]) for e in document["summary"]} == {
        (pool, lr) for pool in ("class token", "GAP") for lr in (1e-3, 1e-2)
    }
    # A second invocation finds every run finished in DIR/runs and reports the same numbers.
    first = document["runs"]
    assert main(argv) == 0
    assert json.loads((tmp_path / "pooling.json").read_text())["runs"] == first


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_pretrain_transfer_end_to_end(tmp_path):
    settings = Settings(
        out=tmp_path, pretrain_steps=2, fractal_classes=3, fractal_per_class=30, fractal_size=16, **TINY
    )
    results, _ = run_experiment("pretrain-transfer", settings)
    document = check_report(tmp_path, "pretrain-transfer", rows=2, metrics=("val_top1",))
    assert [e["start"] for e in document["summary"]] == ["FractalDB pre-trained", "from scratch"]
    pretraining = document["pretraining"]
    assert (pretraining["classes"], pretraining["steps"], pretraining["size"]) == (3, 2, 16)
    assert 0.0 <= pretraining["val_top1"] <= 1.0
    assert (tmp_path / "fractaldb" / "fractaldb.json").is_file()
    # The fine-tuned model started from the pre-trained one: same encoder shapes, a new 10-class head.
    assert load(tmp_path / "runs" / "finetune-seed0").config.num_classes == 10
    assert "wins by" in results.findings[1] and not math.isnan(document["summary"][0]["val_top1"])
