"""evaluate_run, the workflow of `vitlab eval`, called without the command line: it scores exactly
the split the settings name, writes its report and details, and refuses what it cannot use in one line."""

from __future__ import annotations

import json

import pytest
import torch

from helpers import randomise_, write_class_folders
from vitlab.data import load_datasets
from vitlab.errors import InputError
from vitlab.evaluate import evaluate
from vitlab.evaluate.predict import eval_transform
from vitlab.model import create_untrained
from vitlab.training.run_evaluation import evaluate_run

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    options = dict(image_size=8, depth=1, dim=16, num_heads=2, mlp_dim=32, num_classes=3)
    return randomise_(create_untrained("Ti/4", **options)).eval()


@pytest.fixture
def folder(tmp_path):
    write_class_folders(tmp_path / "data", {"a": 6, "b": 6, "c": 6})
    return str(tmp_path / "data")


def test_the_split_named_is_scored_and_reported(model, folder, tmp_path):
    transform = eval_transform(model.config)
    val = load_datasets(folder, transform, transform, val_fraction=0.5, seed=4).val
    expected = evaluate(model, torch.utils.data.DataLoader(val, batch_size=5))
    out = tmp_path / "report" / "eval.json"
    out.parent.mkdir()
    done = evaluate_run(model, "tiny", data=folder, seed=4, val_fraction=0.5, batch_size=5, device="cpu", out=out)
    assert done.evaluation.count == len(val) == expected.count
    assert done.evaluation.top1 == expected.top1
    report = json.loads(out.read_text())
    assert report == json.loads(json.dumps(done.report)) and report["ckpt"] == "tiny"
    assert report["settings"]["seed"] == 4 and report["trained_images_scored"] is None
    assert (out.parent / "confusion.json").is_file() and len(report["per_class"]) == 3
    assert f"({len(val)} images, {folder} val)" in done.describe()
    every = evaluate_run(model, "tiny", data=folder, split="all", device="cpu")
    assert every.evaluation.count == 18 and every.report["split"] == "all"


def test_what_it_cannot_use_is_one_line(model, folder):
    with pytest.raises(InputError, match="--data is needed: tiny has no run.yaml"):
        evaluate_run(model, "tiny")
    with pytest.raises(InputError, match="unknown settings .'sead'."):
        evaluate_run(model, "tiny", data=folder, sead=1)
    with pytest.raises(InputError, match="split 'test'"):
        evaluate_run(model, "tiny", data=folder, split="test")
    with pytest.raises(InputError, match="--split dev: tiny was not trained with a dev split"):
        evaluate_run(model, "tiny", data=folder, split="dev")
    with pytest.raises(InputError, match=r"--max-bad-fraction must be in \[0, 1\), got 1.5"):
        evaluate_run(model, "tiny", data=folder, max_bad_fraction=1.5)
