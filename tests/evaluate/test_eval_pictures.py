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


class Part:
    """A scored part as evaluate_run has it: its files' bytes and names."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def __len__(self) -> int:
        return len(self.names)

    def sample_keys(self) -> list[str]:
        return [f"/data/{name}" for name in self.names]

    def subset(self, indices: list[int], transform: None) -> list[tuple[Image.Image, int]]:
        return [(Image.new("L", (8, 8), 40 * i), 0) for i in indices]


def test_the_gallery_shows_the_surest_mistakes_and_skips_unread_images(tmp_path, monkeypatch):
    from vitlab.evaluate import gallery

    shown = {}
    original = gallery.plot_gallery
    monkeypatch.setattr(
        gallery,
        "plot_gallery",
        lambda images, path, title: shown.update(images=images, title=title) or original(images, path, title),
    )
    log = PredictionLog()
    # a.png was skipped as unreadable: the three predictions are of b, c and d
    log(torch.tensor([[0.0, 2.0], [4.0, 0.0], [3.0, 0.0]]), torch.tensor([0, 1, 0]))
    name = gallery.write_gallery(
        [Part(["a.png", "b.png"]), Part(["c.png", "d.png"])],
        [(0, "a.png", "unreadable")],
        log,
        ["cat", "dog"],
        tmp_path,
    )
    assert name == "misclassified.png" and (tmp_path / name).stat().st_size > 0
    assert shown["title"] == "2 of 3 misclassified"
    assert [caption.split("\n")[0] for _, caption in shown["images"]] == ["c.png", "b.png"]  # surest first
    assert shown["images"][0][1].startswith("c.png\ntrue dog, said cat (0.98)")
