"""predict_files, without the command line: every file of a folder predicted in file order, an
unreadable one a row that says why, results written as they come and a rerun resumed."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from PIL import Image

import vitlab
from helpers import randomise_
from vitlab.errors import InputError
from vitlab.evaluate import PredictedFiles, predict_files
from vitlab.evaluate.predict import eval_transform

pytestmark = pytest.mark.unit


@pytest.fixture
def folder(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    for index in range(3):
        Image.fromarray(np.full((20, 24, 3), 40 * index, np.uint8)).save(images / f"{index}.png")
    (images / "3.png").write_bytes(b"not a png")
    return images


@pytest.fixture
def model():
    torch.manual_seed(0)
    tiny = vitlab.create_model("Ti/8", image_size=16, num_classes=4, class_names=["a", "b", "c", "d"])
    return randomise_(tiny, std=0.05).eval()


def test_a_folder_is_predicted_in_order_and_written_as_it_goes(folder, model, tmp_path):
    seen = []
    out = tmp_path / "top.csv"
    done = predict_files(model, [folder], topk=2, out=out, workers=0, batch_size=2, on_rows=seen.extend)
    assert done == PredictedFiles(files=4, predicted=3, skipped=1)
    assert [path.rsplit("/", 1)[-1] for path, _ in seen] == ["0.png", "1.png", "2.png", "3.png"]
    assert seen[3][1].skipped and "3.png" in seen[3][1].skipped and all(r.top for _, r in seen[:3])
    rows = list(csv.DictReader(out.open()))
    assert [row["status"] for row in rows] == ["ok", "ok", "ok", "skipped"]
    assert [row["label_1"] for row in rows[:3]] == [r.top[0][0] for _, r in seen[:3]]
    again = []
    assert predict_files(model, [folder], topk=2, out=out, workers=0, on_rows=again.extend) == done  # resumed
    assert again == [] and len(list(csv.DictReader(out.open()))) == 4


def test_features_are_written_a_row_per_file(folder, model, tmp_path):
    features = tmp_path / "f.npy"
    predict_files(model, [folder], topk=0, out=tmp_path / "files.jsonl", features=features, workers=0)
    rows = np.load(features)
    assert rows.shape == (4, model.config.feature_dim) and np.isnan(rows[3]).all() and np.isfinite(rows[:3]).all()
    image = eval_transform(model.config)(Image.open(folder / "1.png").convert("RGB"))[None]
    with torch.no_grad():
        expected = model.forward_head(model.forward_features(image), pre_logits=True)[0].numpy()
    np.testing.assert_allclose(rows[1], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "options, says",
    [
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"features": "f.npy"}, "features needs out"),
        ({"out": "top.txt"}, "must end in .csv or .jsonl"),
    ],
)
def test_bad_arguments_are_one_line(folder, model, tmp_path, options, says):
    options = {key: tmp_path / value if key in ("out", "features") else value for key, value in options.items()}
    with pytest.raises(ValueError, match=says) as refused:
        predict_files(model, [folder], workers=0, **options)
    assert "\n" not in str(refused.value)
    assert isinstance(refused.value, InputError) or "--out" in str(refused.value)
