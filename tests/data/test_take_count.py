"""`take_count`: a sample of a class-ordered split spread over its classes (`vitlab analyze --max-images`)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from PIL import Image

from vitlab.data.datasets import ArrayImages
from vitlab.data.splits import take_count


def class_ordered(classes: int, per_class: int) -> ArrayImages:
    labels = np.repeat(np.arange(classes), per_class)  # class 0's images first, as a sorted folder lists them
    return ArrayImages(np.zeros((len(labels), 2, 2, 3), np.uint8), labels)


@pytest.mark.unit
def test_every_class_is_present_and_the_counts_are_logged(caplog):
    dataset = class_ordered(10, 20)
    with caplog.at_level(logging.INFO, logger="vitlab"):
        taken = take_count(dataset, 30, seed=0, class_names=[f"c{i}" for i in range(10)])
    assert len(taken) == 30
    assert np.bincount(taken.labels, minlength=10).tolist() == [3] * 10
    assert "30 of 200 images" in caplog.text and "c0 3, c1 3" in caplog.text
    again = take_count(dataset, 30, seed=0)
    assert taken.sample_keys() == again.sample_keys()  # seeded: the same images each time
    assert taken.sample_keys() != take_count(dataset, 30, seed=1).sample_keys()


@pytest.mark.unit
def test_proportional_to_class_sizes_and_all_when_enough():
    labels = np.array([0] * 60 + [1] * 30 + [2] * 10)
    dataset = ArrayImages(np.zeros((100, 2, 2, 3), np.uint8), labels)
    assert np.bincount(take_count(dataset, 20).labels).tolist() == [12, 6, 2]
    assert take_count(dataset, 100) is dataset and take_count(dataset, 500) is dataset


@pytest.mark.unit
def test_fewer_images_than_classes_are_taken_at_random(caplog):
    with caplog.at_level(logging.INFO, logger="vitlab"):
        taken = take_count(class_ordered(10, 5), 4, seed=0)
    assert len(taken) == 4 and "at random" in caplog.text


@pytest.mark.integration
def test_analyze_max_images_covers_every_class(tmp_path):
    from helpers import randomise_
    from vitlab.cli import main
    from vitlab.model import create_untrained

    data = tmp_path / "data"
    rng = np.random.default_rng(0)
    for label in range(10):
        (data / f"class{label}").mkdir(parents=True)
        for index in range(20):
            pixels = rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(data / f"class{label}" / f"{index}.png")
    names = [f"class{label}" for label in range(10)]
    model = create_untrained(
        "Ti/4", image_size=16, depth=2, dim=32, num_heads=2, mlp_dim=64, num_classes=10, class_names=names
    )
    ckpt = randomise_(model, std=0.1).save_pretrained(tmp_path / "model")
    out = tmp_path / "analysis"
    argv = ["analyze", "--ckpt", str(ckpt), "--data", str(data), "--out", str(out), "--max-images", "30"]
    assert main([*argv, "--what", "distance", "--show", "1", "--device", "cpu"]) == 0
    per_class = json.loads((out / "analysis.json").read_text())["per_class"]
    assert {name: row["images"] for name, row in per_class.items()} == {f"class{label}": 3 for label in range(10)}
