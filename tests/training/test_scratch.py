"""A Ti-sized ViT (width 192, 12 layers, 3 heads) trained from scratch with the small-data recipe on
an ImageFolder the test draws: it learns, well above chance, within the test budget."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image, ImageDraw

from helpers import tiny_config
from vitlab import load
from vitlab.training import Trainer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SHAPES = ("disk", "square", "triangle", "cross")
# Each class has its colour family (and its shape), so that a short run can learn it.
COLOURS = {"disk": (230, 60, 60), "square": (60, 200, 60), "triangle": (60, 90, 230), "cross": (230, 210, 50)}


def draw_shape(shape: str, rng: np.random.Generator, size: int = 32) -> Image.Image:
    """One shape of its class's colour (jittered) at a random position and size on a dark background."""
    background = tuple(int(c) for c in rng.integers(0, 80, 3))
    colour = tuple(int(np.clip(c + rng.integers(-40, 41), 0, 255)) for c in COLOURS[shape])
    image = Image.new("RGB", (size, size), background)
    draw = ImageDraw.Draw(image)
    radius = int(rng.integers(size // 5, size // 3))
    cx, cy = (int(c) for c in rng.integers(radius, size - radius, 2))
    box = (cx - radius, cy - radius, cx + radius, cy + radius)
    if shape == "disk":
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    elif shape == "triangle":
        draw.polygon([(cx, cy - radius), (cx - radius, cy + radius), (cx + radius, cy + radius)], fill=colour)
    else:
        width = max(radius // 3, 2)
        draw.rectangle((cx - radius, cy - width, cx + radius, cy + width), fill=colour)
        draw.rectangle((cx - width, cy - radius, cx + width, cy + radius), fill=colour)
    return image


def write_shapes(root, per_class: dict[str, int], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for split, count in per_class.items():
        for shape in SHAPES:
            folder = root / split / shape
            folder.mkdir(parents=True)
            for index in range(count):
                draw_shape(shape, rng).save(folder / f"{index:03d}.png")


def test_ti_from_scratch_with_small_data_learns(tmp_path, caplog):
    write_shapes(tmp_path / "shapes", {"train": 150, "val": 25})
    # Two unreadable files among the 600 training images (under the 1% limit): skipped and named.
    (tmp_path / "shapes" / "train" / "disk" / "empty.png").write_bytes(b"")
    data = (tmp_path / "shapes" / "train" / "cross" / "000.png").read_bytes()
    (tmp_path / "shapes" / "train" / "cross" / "cut.png").write_bytes(data[: len(data) // 2])
    config = tiny_config(
        tmp_path / "run",
        model={"variant": "Ti/4", "image_size": 16},
        data={"source": str(tmp_path / "shapes"), "batch_size": 32},
        schedule={"steps": 150, "warmup_steps": 15},
        run={"eval_every": 75},
    )
    with caplog.at_level("WARNING", logger="vitlab"):
        trainer = Trainer(config)
    skipped = [r.getMessage() for r in caplog.records if "skipping unreadable image" in r.getMessage()]
    assert len(skipped) == 2 and any("empty.png" in m for m in skipped) and any("cut.png" in m for m in skipped)
    assert len(trainer.train_loader.dataset) == 600
    assert (trainer.model.config.dim, trainer.model.config.depth, trainer.model.config.num_heads) == (192, 12, 3)
    assert trainer.objective.mixing is not None and trainer.config.augment.randaugment == (2, 10)  # the recipe as it is
    result = trainer.fit()
    chance = 1 / len(SHAPES)
    assert result.summary["val_top1"] >= 0.6 > chance, result.summary
    summary = json.loads((result.out / "summary.json").read_text())
    assert summary["steps"] == 150 and load(result.out).config.class_names == sorted(SHAPES)
