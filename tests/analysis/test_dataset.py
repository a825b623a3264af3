"""`vitlab analyze` over a dataset: per-class attention distance and rollout equal a manual computation
over the same images, and the images pass batch by batch, never all held at once."""

from __future__ import annotations

import json
import weakref

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset, default_collate

from helpers import CHROMIUM, CHROMIUM_ARGS, randomise_, require_chromium, tiny_config
from vitlab.analysis import attention_distance, attention_maps
from vitlab.analysis.dataset import dataset_attention
from vitlab.cli import main
from vitlab.data import read_image
from vitlab.evaluate.predict import eval_transform
from vitlab.model import create_untrained
from vitlab.weights import load

CLASSES = {"ant": 3, "bee": 2}


def tiny_model(folder):
    model = randomise_(
        create_untrained(
            "Ti/4",
            image_size=8,
            depth=2,
            dim=16,
            num_heads=2,
            mlp_dim=32,
            num_classes=len(CLASSES),
            class_names=list(CLASSES),
        ),
        std=0.3,
    )
    model.config.preprocessing.crop_pct = 1.0
    model.save_pretrained(folder)
    return folder


def tiny_folder(root):
    rng = np.random.default_rng(1)
    for split in ("train", "val"):
        for name, count in CLASSES.items():
            (root / split / name).mkdir(parents=True)
            for index in range(count):
                pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / name / f"{index}.png")
    return root


def manual_per_class(ckpt, root):
    """Each val image alone through the model: its distance (layers, heads) and rollout, averaged per class."""
    model = load(ckpt).eval()
    transform = eval_transform(model.config)
    config = model.config
    expected = {}
    for name in CLASSES:
        distances, rollouts, right = [], [], []
        for path in sorted((root / "val" / name).iterdir()):
            image = transform(read_image(path))[None]
            maps = attention_maps(model, image)
            distances.append(attention_distance(maps.attentions, (2, 2), 4, config.num_prefix_tokens)[0].numpy())
            rollouts.append(maps.rollout[0].numpy())
            right.append(int(maps.logits.argmax()) == list(CLASSES).index(name))
        expected[name] = (
            np.mean(distances, axis=0),
            np.mean(rollouts, axis=0),
            np.mean(right),
        )
    return expected


@pytest.mark.integration
def test_per_class_averages_of_a_runs_own_data_equal_a_manual_computation(tmp_path):
    root = tiny_folder(tmp_path / "data")
    ckpt = tiny_model(tmp_path / "run")
    config = tiny_config(ckpt)
    config.data.source = str(root)
    (ckpt / "run.yaml").write_text(config.to_yaml())  # a training run's folder: analyze takes its data
    out = tmp_path / "analysis"
    assert (
        main(
            [
                "analyze",
                "--ckpt",
                str(ckpt),
                "--out",
                str(out),
                "--batch-size",
                "2",
                "--show",
                "2",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    numbers = json.loads((out / "analysis.json").read_text())
    expected = manual_per_class(ckpt, root)
    assert list(numbers["per_class"]) == list(CLASSES)
    for name, (distance, rollout, top1) in expected.items():
        row = numbers["per_class"][name]
        assert row["images"] == CLASSES[name]
        np.testing.assert_allclose(row["mean_attention_distance"], distance, atol=2e-3)
        np.testing.assert_allclose(row["rollout"], rollout, atol=2e-5)
        assert row["top1"] == pytest.approx(top1)
    assert not np.allclose(expected["ant"][1], expected["bee"][1])  # the classes' maps differ: a real check
    overall = (expected["ant"][0] * 3 + expected["bee"][0] * 2) / 5
    np.testing.assert_allclose(numbers["mean_attention_distance"]["pixels"], overall, atol=2e-3)
    assert numbers["mean_attention_distance"]["images"] == 5
    assert np.array(numbers["heads_first_image"]["maps"]).shape == (
        2,
        2,
        2,
        2,
    )  # layers, heads, grid
    for figure in (
        "attention_distance_per_class.png",
        "rollout_per_class.png",
        "heads.png",
        "rollout.png",
    ):
        with Image.open(out / figure) as picture:
            assert picture.format == "PNG" and min(picture.size) > 100
    page = (out / "report.html").read_text()
    assert "<h2>Per class</h2>" in page and "<td>ant</td><td>3</td>" in page

    # --data names the source directly; --max-images takes the first images of its val split.
    assert (
        main(
            [
                "analyze",
                "--ckpt",
                str(ckpt),
                "--data",
                str(root),
                "--max-images",
                "4",
                "--what",
                "distance",
                "--out",
                str(tmp_path / "four"),
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    numbers = json.loads((tmp_path / "four" / "analysis.json").read_text())
    assert {n: r["images"] for n, r in numbers["per_class"].items()} == {
        "ant": 3,
        "bee": 1,
    }


class CountingImages(Dataset):
    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int):
        generator = torch.Generator().manual_seed(index)
        return torch.randn(3, 8, 8, generator=generator), index % 2


class LiveBatches:
    """A collate function that counts the batches still referenced anywhere."""

    def __init__(self) -> None:
        self.live = self.most = self.made = 0

    def _gone(self) -> None:
        self.live -= 1

    def __call__(self, samples):
        images, labels = default_collate(samples)
        self.made += 1
        self.live += 1
        self.most = max(self.most, self.live)
        weakref.finalize(images, self._gone)
        return images, labels


@pytest.mark.unit
def test_images_pass_batch_by_batch(tmp_path):
    model = load(tiny_model(tmp_path / "model")).eval()
    counter = LiveBatches()
    loader = DataLoader(CountingImages(12), batch_size=2, collate_fn=counter)
    result = dataset_attention(model, loader, list(CLASSES))
    assert counter.made == 6 and result.images == 12
    assert counter.most <= 2  # the batch in hand and the next one being made, never all six
    assert {label: sums.images for label, sums in result.sums.items()} == {0: 6, 1: 6}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_report_opens_offline_in_chromium_with_every_figure_and_the_per_class_numbers(
    tmp_path,
):
    from playwright.sync_api import sync_playwright

    require_chromium()
    root = tiny_folder(tmp_path / "data")
    ckpt = tiny_model(tmp_path / "model")
    out = tmp_path / "analysis"
    assert (
        main(
            [
                "analyze",
                "--ckpt",
                str(ckpt),
                "--data",
                str(root),
                "--out",
                str(out),
                "--show",
                "2",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    numbers = json.loads((out / "analysis.json").read_text())
    figures = sorted(out.glob("*.png"))
    report = (out / "report.html").resolve()
    outside: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.on(
                "request",
                lambda r: None if r.url.startswith(("data:", report.as_uri())) else outside.append(r.url),
            )
            page.goto(report.as_uri(), wait_until="load")
            sizes = page.eval_on_selector_all("img", "imgs => imgs.map(i => [i.complete, i.naturalWidth])")
            text = page.inner_text("body")
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert len(sizes) == len(figures) >= 7  # every PNG written is on the page
    assert all(complete and width > 0 for complete, width in sizes), sizes
    assert outside == []  # self-contained: the page asks nothing of the network or the disk
    assert "Per class" in text and "5 images" in text
    lines = text.splitlines()
    for name, row in numbers["per_class"].items():  # the table's row: class, images, top-1, distance
        start = f"{name}\t{row['images']}\t{row['top1']:.4f}\t"
        cells = [line for line in lines if line.startswith(start)]
        assert len(cells) == 1, (start, lines)
        mean = float(np.mean(row["mean_attention_distance"]))
        assert float(cells[0][len(start) :]) == pytest.approx(mean, abs=0.006)
    with Image.open(tmp_path / "report.png") as shot:
        assert shot.size[0] == 1100 and shot.size[1] > 900
