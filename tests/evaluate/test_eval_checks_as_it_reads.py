"""`vitlab eval` checks the scored files as the evaluation reads them, not in a pass of its own before
it: an unreadable file is skipped, named in the log and in the report, and the numbers on the readable
files are those of a folder without it."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from PIL import Image

from helpers import randomise_
from vitlab.cli import main
from vitlab.data import scan
from vitlab.model import create_untrained

pytestmark = pytest.mark.unit


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(0)
    for split, count in (("train", 2), ("val", 6)):
        for label in range(2):
            (tmp_path / "data" / split / f"c{label}").mkdir(parents=True)
            for index in range(count):
                pixels = np.clip(80 * label + rng.normal(60, 50, (8, 8, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(tmp_path / "data" / split / f"c{label}" / f"{index}.png")
    options = dict(image_size=8, depth=1, dim=16, num_heads=2, mlp_dim=32, num_classes=2)
    randomise_(create_untrained("Ti/4", **options)).save_pretrained(tmp_path / "model")
    return tmp_path


def evaluate(folder, name: str) -> dict:
    argv = ["eval", "--ckpt", str(folder / "model"), "--data", str(folder / "data"), "--device", "cpu"]
    assert main([*argv, "--batch-size", "4", "--max-bad-fraction", "0.2", "--out", str(folder / name)]) == 0
    return json.loads((folder / name).read_text())


@pytest.mark.fault("images", kinds=1)
def test_a_bad_file_is_found_while_evaluating_and_reported(folder, monkeypatch, caplog):
    clean = evaluate(folder, "clean.json")
    assert clean["skipped"] == [] and clean["metrics"]["count"] == 12
    (folder / "data" / "val" / "c1" / "2.png").write_bytes(b"")

    def no_pass_before(*args, **kwargs):
        raise AssertionError("the scored files were decoded before the evaluation")

    monkeypatch.setattr(scan, "scan_images", no_pass_before)
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        report = evaluate(folder, "report.json")
    bad = str(folder / "data" / "val" / "c1" / "2.png")
    assert report["skipped"] == [{"file": bad, "reason": "empty file (0 bytes)"}]
    assert sum(f"skipping unreadable image {bad}" in r.getMessage() for r in caplog.records) == 1
    assert report["metrics"]["count"] == 11
    (folder / "data" / "val" / "c1" / "2.png").unlink()  # the same numbers as a folder without it
    assert evaluate(folder, "without.json")["metrics"] == report["metrics"]
