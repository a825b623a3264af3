"""The two photos scikit-learn ships (427 x 640, not square) through vitlab, through timm from the
exported timm folder, and through transformers' image-classification pipeline from the exported
folders: the same top-5 and the same probabilities (1e-4), each library preparing the photo itself.

transformers' centre crop starts at floor(margin / 2) where torchvision (vitlab, timm) rounds: the
case where that moves the crop by a pixel is kept, and shows what the HF export says of it."""

from __future__ import annotations

import logging

import pytest
import torch
from PIL import Image

import vitlab
from helpers import randomise_
from vitlab.evaluate.predict import eval_transform

timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")
sklearn_datasets = pytest.importorskip("sklearn.datasets")

pytestmark = pytest.mark.integration

NAMES = [f"class {i}" for i in range(10)]
# (image size, preprocessing): squashed and centre-cropped models, square and not. A squash's margins
# are the model's (here even: no warning); a centre crop's long-side margin is the photo's (36 x 53
# here: 21 pixels, where the roundings agree), so the HF export always names the rounding.
CASES = {
    "wide-squash": ((32, 48), dict(crop_pct=0.875)),
    "tall-whole-image": ((48, 32), dict(crop_pct=1.0, interpolation="bilinear")),
    "square-squash": ((64, 64), dict(crop_pct=0.8, crop_mode="squash")),
    "square-centre": ((32, 32), dict(crop_pct=0.875)),
}


@pytest.fixture(scope="module")
def photos() -> list[Image.Image]:
    return [Image.fromarray(array) for array in sklearn_datasets.load_sample_images().images]


def exported(tmp_path, size, preprocessing, caplog) -> tuple[vitlab.VisionTransformer, str]:
    model = vitlab.create_model(
        "Ti/16", image_size=size, depth=2, num_classes=10, class_names=NAMES, preprocessing=preprocessing
    )
    randomise_(model).eval()
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        model.save_pretrained(tmp_path / "timm", format="timm")
        model.save_pretrained(tmp_path / "hf", format="hf")
    return model, caplog.text


def vitlab_probabilities(model, photo) -> dict[str, float]:
    with torch.no_grad():
        probabilities = model(eval_transform(model.config)(photo)[None]).softmax(-1)[0]
    return dict(zip(NAMES, probabilities.tolist()))


def timm_probabilities(folder, photo) -> dict[str, float]:
    peer = timm.create_model(f"local-dir:{folder}", pretrained=True).eval()
    transform = timm.data.create_transform(**timm.data.resolve_model_data_config(peer))
    with torch.no_grad():
        probabilities = peer(transform(photo)[None]).softmax(-1)[0]
    return dict(zip(peer.pretrained_cfg["label_names"], probabilities.tolist()))


def pipeline_probabilities(folder, photo) -> dict[str, float]:
    classify = transformers.pipeline("image-classification", model=str(folder))
    return {entry["label"]: entry["score"] for entry in classify(photo, top_k=len(NAMES))}


def agree(expected: dict[str, float], got: dict[str, float]) -> tuple[bool, float]:
    """(the same top-5 in the same order, the largest probability difference)."""
    top5 = [sorted(d, key=d.__getitem__, reverse=True)[:5] for d in (expected, got)]
    return top5[0] == top5[1], max(abs(expected[name] - got[name]) for name in NAMES)


@pytest.mark.parametrize("case", CASES)
def test_vitlab_timm_and_the_pipeline_give_the_same_top5_on_two_photos(tmp_path, monkeypatch, photos, case, caplog):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, said = exported(tmp_path, *CASES[case], caplog)
    assert ("one pixel" in said) == (case == "square-centre")
    for photo in photos:
        expected = vitlab_probabilities(model, photo)
        assert max(expected.values()) - min(expected.values()) > 0.05  # the order is a real check
        for got in (
            timm_probabilities(tmp_path / "timm", photo),
            pipeline_probabilities(tmp_path / "hf", photo),
            pipeline_probabilities(tmp_path / "timm", photo),  # transformers runs timm's folder too
        ):
            same_top5, difference = agree(expected, got)
            assert same_top5 and difference < 1e-4


def test_a_crop_transformers_rounds_otherwise_is_said_and_timms_folder_still_agrees(
    tmp_path, monkeypatch, photos, caplog
):
    """224 px, crop 0.875: the photos resize to 256 x 383, a margin of 159 pixels: vitlab and timm
    start the crop at 80, transformers at 79."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, said = exported(tmp_path, (224, 224), dict(crop_pct=0.875), caplog)
    assert "one pixel apart" in said and "--format timm" in said
    photo = photos[0]
    expected = vitlab_probabilities(model, photo)
    for got in (timm_probabilities(tmp_path / "timm", photo), pipeline_probabilities(tmp_path / "timm", photo)):
        assert agree(expected, got) == (True, pytest.approx(0.0, abs=1e-4))
    _, difference = agree(expected, pipeline_probabilities(tmp_path / "hf", photo))
    assert difference > 1e-4  # the pixel the export warned of
