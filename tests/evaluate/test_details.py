"""Past top-1 in `vitlab eval`: calibration (ECE), the confusion matrix, per-class accuracy and ImageNet-ReaL."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import one_line_error, randomise_
from vitlab.cli import main
from vitlab.evaluate import predict_images
from vitlab.evaluate.breakdown import PredictionLog, confusion_matrix, per_class
from vitlab.evaluate.calibration import calibration
from vitlab.model import create_untrained
from vitlab.weights import load

pytestmark = pytest.mark.unit


def test_ece_by_hand():
    # 15 bins of width 1/15. Bin (13/15, 14/15]: 0.90 right, 0.92 wrong -> acc 0.5, conf 0.91.
    # Bin (7/15, 8/15]: 0.50 right -> |1 - 0.5|. Bin (14/15, 1]: 1.0 right -> 0.
    result = calibration(np.array([0.90, 0.92, 0.50, 1.0]), np.array([True, False, True, True]))
    assert result.ece == pytest.approx(2 / 4 * abs(0.5 - 0.91) + 1 / 4 * abs(1.0 - 0.5))  # 0.33
    assert result.counts[13] == 2 and result.counts[7] == 1 and result.counts[14] == 1 and sum(result.counts) == 4
    assert result.accuracy[13] == 0.5 and result.accuracy[0] is None
    # The bins are closed on the right: a confidence on an edge belongs to the bin below it.
    edge = calibration(np.array([np.linspace(0, 1, 16)[9]]), np.array([True]))
    assert edge.counts[8] == 1
    # Perfectly calibrated: confidence equals accuracy in every bin.
    assert calibration(np.array([0.6] * 5), np.array([1, 1, 1, 0, 0], bool)).ece == pytest.approx(0.0)


def test_confusion_matrix_and_per_class_from_logged_batches():
    log = PredictionLog()
    # true labels 0 0 1 2 2 2, predicted 0 1 1 2 0 2 (argmax of the rows)
    logits = torch.eye(3)[[0, 1, 1, 2, 0, 2]] * 4.0
    labels = torch.tensor([0, 0, 1, 2, 2, 2])
    log(logits[:4], labels[:4])
    log(logits[4:], labels[4:])  # two batches, kept in order
    truth, predicted, confidence = log.arrays()
    matrix = confusion_matrix(truth, predicted, 3)
    np.testing.assert_array_equal(matrix, [[1, 1, 0], [0, 1, 0], [1, 0, 2]])
    np.testing.assert_allclose(confidence, np.exp(4) / (np.exp(4) + 2))
    rows = per_class(matrix, ["a", "b", "c"])
    assert rows["a"] == {"images": 2, "correct": 1, "top1": 0.5}
    assert rows["c"]["top1"] == pytest.approx(2 / 3) and rows["b"]["top1"] == 1.0


def fake_imagenet(root, files: dict[str, list[str]]) -> None:
    """root/train and root/val, one folder per class, noise images under the given names."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for name, images in files.items():
            (root / split / name).mkdir(parents=True)
            for image in images:
                pixels = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / image)


@pytest.mark.fault("input", kinds=2)
def test_real_accuracy_matches_images_by_sorted_file_name(tmp_path, capsys):
    # Loader order is class folder then file; sorted file names interleave the classes.
    files = {
        "n01": ["v3.png", "v5.png"],
        "n02": ["v1.png", "v4.png"],
        "n03": ["v2.png"],
    }
    fake_imagenet(tmp_path / "data", files)
    model = randomise_(
        create_untrained(
            "Ti/4",
            image_size=8,
            depth=1,
            dim=16,
            num_heads=2,
            mlp_dim=32,
            num_classes=3,
            class_names=list(files),
        ),
        std=0.5,
    )
    with torch.no_grad():  # no constant offset before the head: the predictions follow the images
        model.norm.bias.zero_()
        model.head.bias.zero_()
    model.config.preprocessing.crop_pct = 1.0
    model.save_pretrained(tmp_path / "model")
    paths = sorted((tmp_path / "data" / "val").glob("*/*.png"), key=lambda p: p.name)  # v1 .. v5
    names = list(files)
    predicted = [
        names.index(p.label) for p in predict_images(load(tmp_path / "model"), [Image.open(path) for path in paths])
    ]
    # v1: the prediction among two labels (right), v2: another class only (wrong), v3: no label (left out),
    # v4: exactly the prediction (right), v5: the two other classes (wrong) -> 2 of 4.
    assert len(set(predicted)) > 1, predicted  # the mapping is tested only if the predictions differ
    others = [[k for k in range(3) if k != guess] for guess in predicted]
    real = [
        sorted({predicted[0], others[0][0]}),
        [others[1][0]],
        [],
        [predicted[3]],
        others[4],
    ]
    (tmp_path / "real.json").write_text(json.dumps(real))
    out = tmp_path / "report" / "eval.json"
    assert (
        main(
            [
                "eval",
                "--ckpt",
                str(tmp_path / "model"),
                "--data",
                str(tmp_path / "data"),
                "--real-labels",
                str(tmp_path / "real.json"),
                "--out",
                str(out),
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    assert report["real"] == {"top1": 0.5, "images": 4, "left_out": 1}
    assert {
        "ckpt",
        "data",
        "split",
        "image_size",
        "metrics",
        "trained_images_scored",
        "settings",
    } <= set(report)
    # The confusion matrix beside the report: rows are the val folders' true classes.
    confusion = json.loads((out.parent / "confusion.json").read_text())
    truth = [names.index(path.parent.name) for path in paths]
    np.testing.assert_array_equal(confusion["matrix"], confusion_matrix(np.array(truth), np.array(predicted), 3))
    with Image.open(out.parent / "confusion.png") as picture:
        assert picture.format == "PNG" and min(picture.size) > 200
    assert report["metrics"]["top1"] == pytest.approx(np.mean(np.array(truth) == np.array(predicted)))
    assert 0.0 <= report["metrics"]["ece"] <= 1.0 and report["calibration"]["bins"] == 15
    assert sum(row["images"] for row in report["per_class"].values()) == 5
    assert "ReaL top-1 0.5000" in capsys.readouterr().out

    (tmp_path / "short.json").write_text(json.dumps(real[:4]))
    message = one_line_error(
        capsys,
        [
            "eval",
            "--ckpt",
            str(tmp_path / "model"),
            "--data",
            str(tmp_path / "data"),
            "--real-labels",
            str(tmp_path / "short.json"),
            "--out",
            str(out),
        ],
    )
    assert "has labels for 4 images but 5 are scored" in message
    (tmp_path / "big.json").write_text(json.dumps([[7]] * 5))
    message = one_line_error(
        capsys,
        [
            "eval",
            "--ckpt",
            str(tmp_path / "model"),
            "--data",
            str(tmp_path / "data"),
            "--real-labels",
            str(tmp_path / "big.json"),
            "--out",
            str(out),
        ],
    )
    assert "entry 0 has class 7, outside the model's 3" in message
