"""eval's pictures and per-class report: the reliability diagram and scikit-learn's precision /
recall / F1 beside the confusion matrix, each named in the returned details."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from vitlab.evaluate.breakdown import PredictionLog
from vitlab.evaluate.details import write_details

pytestmark = pytest.mark.unit


def test_eval_writes_the_reliability_diagram_and_the_per_class_report(tmp_path):
    log = PredictionLog()
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    logits = torch.tensor([[3.0, 0, 0], [0, 3, 0], [0, 3, 0], [0, 3, 0], [0, 0, 3], [3, 0, 0]])
    log(logits, labels)
    details = write_details(log, ["cat", "dog", "fox"], tmp_path)
    assert details["files"] == ["confusion.json", "confusion.png", "reliability.png", "classification_report.txt"]
    for name in details["files"]:
        assert (tmp_path / name).stat().st_size > 0
    with Image.open(tmp_path / "reliability.png") as picture:
        assert picture.width > 300 and picture.height > 300
    report = details["classification_report"]
    # dog: 3 predicted, 2 right (precision 2/3); 2 images, both found (recall 1)
    assert report["dog"]["precision"] == pytest.approx(2 / 3) and report["dog"]["recall"] == 1.0
    assert report["fox"]["recall"] == 0.5 and report["cat"]["f1-score"] == pytest.approx(0.5)
    text = (tmp_path / "classification_report.txt").read_text()
    assert "precision" in text and "fox" in text
