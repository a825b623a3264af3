"""`vitlab eval` on a run folder scores the run's own validation split (seed, val_fraction and
train_fraction from its run.yaml) and reports exactly its summary.json accuracy; scored training
images are a warning; only the scored split is checked; top-5 is n/a with 5 classes or fewer."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import BAD_IMAGES, write_cifar
from vitlab.cli import main
from vitlab.evaluate import evaluate

# A one-layer ViT at 8 px; few steps, so that each run takes a second or two.
TINY = [
    "--recipe",
    "small-data",
    "--model",
    "mu/4",
    "--image-size",
    "8",
    "--threads",
    "1",
    "--set",
    "schedule.warmup_steps=2",
    "--set",
    "augment.mixup=0",
    "--set",
    "augment.cutmix=0",
    "--set",
    "augment.randaugment=null",
    "--lr",
    "0.003",
]


def write_noisy_classes(root: Path, classes: int, per_class: int, seed: int = 0) -> None:
    """Class c is grey level 60 * c plus noise, so that a few steps learn something, not everything."""
    rng = np.random.default_rng(seed)
    for label in range(classes):
        (root / f"c{label}").mkdir(parents=True, exist_ok=True)
        for index in range(per_class):
            pixels = np.clip(60 * label + rng.normal(0, 50, (8, 8, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / f"c{label}" / f"{index:03d}.png")


def train(data: str, out: Path, *extra: str) -> dict:
    assert main(["train", *TINY, "--data", data, "--out", str(out), *extra]) == 0
    return json.loads((out / "summary.json").read_text())


def eval_report(run: Path, *extra: str) -> dict:
    assert main(["eval", "--ckpt", str(run), *extra]) == 0
    return json.loads((run / "eval_summary.json").read_text())


def scored_training_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "in the run's training set" in r.getMessage()]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_imagefolder_run_with_its_own_seed_and_val_fraction(tmp_path, caplog, capsys):
    write_noisy_classes(tmp_path / "data", classes=3, per_class=24)  # 72 images, half held out
    data, run = str(tmp_path / "data"), tmp_path / "run"
    summary = train(
        data,
        run,
        "--seed",
        "3",
        "--set",
        "data.val_fraction=0.5",
        "--batch-size",
        "12",
        "--steps",
        "12",
        "--eval-every",
        "12",
    )
    assert summary["val_top5"] is None  # 3 classes: top-5 would count every image
    assert "| val_top5 | n/a |" in (run / "README.md").read_text()
    with caplog.at_level(logging.INFO, logger="vitlab"):
        report = eval_report(run, "--data", data)
    metrics = report["metrics"]
    assert metrics["count"] == 36 and report["trained_images_scored"] == 0
    assert metrics["top1"] == summary["val_top1"] and metrics["loss"] == pytest.approx(summary["val_loss"], rel=1e-6)
    assert 1 / 3 < metrics["top1"] < 1.0, "the test needs a model that learned something but not everything"
    assert metrics["top5"] is None and "top-5 n/a (3 classes" in capsys.readouterr().out
    assert report["settings"]["seed"] == 3 and report["settings"]["val_fraction"] == 0.5
    assert not scored_training_warnings(caplog)

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="vitlab"):
        report = eval_report(run, "--data", data, "--seed", "0")  # another seed: another split
    messages = [r.getMessage() for r in caplog.records]
    assert any("--seed 0 overrides the run's run.seed=3" in m for m in messages)
    overlap = report["trained_images_scored"]
    assert 0 < overlap < 36 and scored_training_warnings(caplog)[0].startswith(f"{overlap} of the 36 scored images")

    report = eval_report(run, "--split", "all")  # --data defaults to the run's
    assert report["metrics"]["count"] == 72 and report["trained_images_scored"] == 36


@pytest.mark.integration
def test_cifar_run(tmp_path):
    write_cifar(tmp_path / "cifar", "cifar10", per_batch=8)  # 40 training and 8 test images
    data, run = f"cifar10:{tmp_path / 'cifar'}", tmp_path / "run"
    summary = train(data, run, "--batch-size", "8", "--steps", "4", "--eval-every", "4")
    report = eval_report(run)
    assert report["data"] == data and report["metrics"]["count"] == 8 and report["trained_images_scored"] == 0
    assert report["metrics"]["top1"] == summary["val_top1"] and report["metrics"]["top5"] == summary["val_top5"]
    train_report = eval_report(run, "--split", "train")
    assert train_report["metrics"]["count"] == 40 and train_report["trained_images_scored"] == 40
    assert main(["eval", "--ckpt", str(run), "--split", "dev"]) == 2  # the run has no dev split


@pytest.mark.integration
@pytest.mark.fault("images", kinds=1)
def test_eval_checks_only_the_scored_split_with_the_runs_bad_image_limit(tmp_path, caplog):
    write_noisy_classes(tmp_path / "data" / "train", classes=2, per_class=12)
    write_noisy_classes(tmp_path / "data" / "val", classes=2, per_class=4, seed=1)
    for name in ("empty.jpg", "text_not_image.png"):  # 2 of 26 training files: over the 1% default
        (tmp_path / "data" / "train" / "c1" / name).write_bytes(BAD_IMAGES[name][0]())
    run = tmp_path / "run"
    summary = train(
        str(tmp_path / "data"),
        run,
        "--set",
        "data.max_bad_fraction=0.1",
        "--batch-size",
        "8",
        "--steps",
        "3",
        "--eval-every",
        "3",
    )
    assert sum("skipping unreadable" in r.getMessage() for r in caplog.records) == 2  # training checked train/
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        report = eval_report(run)
    assert report["metrics"]["count"] == 8 and report["metrics"]["top1"] == summary["val_top1"]
    assert not [r for r in caplog.records if "unreadable" in r.getMessage()]  # train/ was not decoded
    assert main(["eval", "--ckpt", str(run), "--split", "train", "--max-bad-fraction", "0.01"]) == 2


@pytest.mark.unit
def test_top5_is_na_with_five_classes_or_fewer():
    images, labels = torch.randn(12, 4), torch.arange(12) % 3
    for classes, expected_na in ((3, True), (5, True), (6, False)):
        model = torch.nn.Linear(4, classes)
        result = evaluate(model, [(images, labels % classes)])
        assert (result.top5 is None) == expected_na and result.num_classes == classes
        assert ("top-5 n/a" in result.describe()) == expected_na
    many = evaluate(torch.nn.Linear(4, 10), [(images, labels)])
    assert 0 < many.top5 <= 1 and many.top1 <= many.top5


@pytest.mark.unit
@pytest.mark.fault("bad-input", kinds=1)
def test_a_model_folder_without_run_yaml_needs_data_and_cannot_tell_training_images(tmp_path, capsys):
    import vitlab

    model = vitlab.create_model("mu/4", image_size=8, num_classes=10, class_names=[str(d) for d in range(10)])
    vitlab.save_pretrained(model, tmp_path / "model")
    assert main(["eval", "--ckpt", str(tmp_path / "model")]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("--data is needed: " + str(tmp_path / "model") + " has no run.yaml naming the data it was trained on")
    )
    report = eval_report(tmp_path / "model", "--data", "digits")
    assert report["metrics"]["count"] == 360 and report["trained_images_scored"] is None
    assert report["settings"]["from"] is None and report["settings"]["batch_size"] == 64


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_run_with_a_dev_split(tmp_path):
    run = tmp_path / "run"
    summary = train(
        "digits",
        run,
        "--set",
        "data.dev_fraction=0.25",
        "--set",
        "data.dev_split=last",
        "--batch-size",
        "32",
        "--steps",
        "6",
        "--eval-every",
        "6",
    )
    dev = eval_report(run, "--split", "dev")  # what the run validated on
    assert dev["metrics"]["count"] == summary["dev_images"] and dev["trained_images_scored"] == 0
    assert dev["metrics"]["top1"] == summary["val_top1"]
    test = eval_report(run)  # the source's validation split: the run's test split
    assert test["metrics"]["count"] == summary["test_images"] == 360 and test["trained_images_scored"] == 0
    assert test["metrics"]["top1"] == summary["test_top1"]
    everything = eval_report(run, "--split", "all")
    assert everything["metrics"]["count"] == 1797 and everything["trained_images_scored"] == summary["train_images"]


@pytest.mark.integration
@pytest.mark.fault("bad-input", kinds=1)
def test_eval_says_when_the_data_changed_since_the_run(tmp_path, caplog):
    from helpers import tiny_config, write_class_folders
    from vitlab.training import Trainer

    data, run = tmp_path / "data", tmp_path / "run"
    write_class_folders(data, {"cat": 10, "dog": 10})
    sections = dict(data={"source": str(data), "batch_size": 4}, run={"eval_every": 2})
    Trainer(tiny_config(run, schedule={"steps": 2, "warmup_steps": 1}, **sections)).fit()
    changed = "has changed since the run trained on it"
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        assert main(["eval", "--ckpt", str(run)]) == 0
    assert changed not in caplog.text
    write_class_folders(tmp_path / "more", {"cat": 1})
    (tmp_path / "more" / "cat" / "00000.png").rename(data / "cat" / "new.png")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        assert main(["eval", "--ckpt", str(run)]) == 0
    assert f"{data} {changed} (16 images, sha256 " in caplog.text


def same_bytes_as(files: list[Path], others: list[Path]) -> int:
    """How many of `files` hold the bytes of one of `others`: the test's own count."""
    known = {path.read_bytes() for path in others}
    return sum(path.read_bytes() in known for path in files)


@pytest.mark.integration
def test_training_images_are_found_by_their_bytes_under_any_path(tmp_path, caplog):
    """A copy of the run's folder with images added, and the folder changed in place: eval warns and
    records how many scored images the run trained on, as the test counts them byte by byte."""
    import shutil

    from vitlab.data import load_datasets

    data, run = tmp_path / "data", tmp_path / "run"
    write_noisy_classes(data, classes=3, per_class=12)
    train(str(data), run, "--batch-size", "8", "--steps", "2", "--eval-every", "2")
    assert (run / "train_digests.npy").is_file()  # written as the run started
    split = {"seed": 0, "val_fraction": 0.2, "check_splits": ()}  # the run's (run.yaml)
    trained = [Path(key) for key in load_datasets(str(data), None, None, **split).train.sample_keys()]

    copy = tmp_path / "copy"
    shutil.copytree(data, copy)
    write_noisy_classes(copy / "added", classes=3, per_class=4, seed=7)  # 12 new files, moved into the classes
    for path in sorted((copy / "added").rglob("*.png"))[:10]:
        path.rename(copy / path.parent.name / f"new-{path.name}")
    shutil.rmtree(copy / "added")
    scored = [Path(key) for key in load_datasets(str(copy), None, None, **split).val.sample_keys()]
    expected = same_bytes_as(scored, trained)
    assert expected > 0  # the copy's other split: some of its validation images are training images
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        report = eval_report(run, "--data", str(copy))
    assert (report["trained_images_scored"], report["trained_images_found_by"]) == (expected, "content")
    assert scored_training_warnings(caplog)[0].startswith(f"{expected} of the {len(scored)} scored images")

    validation = [Path(key) for key in load_datasets(str(data), None, None, **split).val.sample_keys()]
    for target, source in zip(validation[:3], trained[:3]):  # changed in place: 3 validation files now trained ones
        target.write_bytes(source.read_bytes())
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        report = eval_report(run)
    assert report["trained_images_scored"] == same_bytes_as(validation, trained) == 3
    assert scored_training_warnings(caplog)
