"""The demo's classifier (limits, top-5, rollout overlay) and its JSON endpoint, through an HTTP client."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image

import vitlab
from helpers import randomise_
from vitlab.cli import main
from vitlab.data import BadImageError
from vitlab.model import Preprocessing, ViTConfig
from vitlab.serve import ImageClassifier, Limits
from vitlab.serve.app import build_app, is_loopback

pytestmark = pytest.mark.unit

NAMES = ["red", "green", "blue", "cyan", "magenta", "yellow", "black"]


def tiny_model(**options) -> vitlab.VisionTransformer:
    config = ViTConfig(
        image_size=32,
        patch_size=8,
        dim=32,
        depth=2,
        num_heads=4,
        mlp_dim=64,
        num_classes=len(NAMES),
        class_names=NAMES,
        preprocessing=Preprocessing(crop_pct=1.0),
        **options,
    )
    return randomise_(vitlab.create_model(config)).eval()


def png(width: int = 48, height: int = 40, colour=(200, 40, 30)) -> bytes:
    image = Image.new("RGB", (width, height), colour)
    image.paste((20, 20, 220), (width // 4, height // 4, width // 2, height // 2))  # some structure to attend to
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize("pool", ["token", "gap"])
def test_classify_gives_top5_of_the_models_own_probabilities_and_an_overlay(pool):
    model = tiny_model(pool=pool)
    classifier = ImageClassifier(model)
    result = classifier.classify(png(), name="shapes.png")

    with torch.no_grad():
        probs = model(classifier.transform(Image.open(io.BytesIO(png())).convert("RGB"))[None]).softmax(-1)[0]
    expected = probs.topk(5)
    assert [label for label, _ in result.top] == [NAMES[i] for i in expected.indices]
    assert [p for _, p in result.top] == pytest.approx(expected.values.tolist(), abs=1e-6)
    assert result.model_input.size == result.overlay.size and min(result.overlay.size) >= 32
    # The overlay is the input tinted by the heat map: it differs from the input, but not everywhere alike.
    difference = np.abs(np.asarray(result.overlay, dtype=np.float32) - np.asarray(result.model_input, dtype=np.float32))
    assert difference.mean() > 5 and difference.sum(-1).std() > 1
    assert result.as_json()["top"][0] == {"label": result.top[0][0], "prob": round(result.top[0][1], 6)}


@pytest.mark.fault("bad-input", kinds=3)
def test_limits_refuse_large_uploads_and_huge_images_before_decoding():
    classifier = ImageClassifier(tiny_model(), Limits(max_bytes=2000, max_pixels=100 * 100))
    with pytest.raises(BadImageError, match=r"big.png: .* MiB is above the upload limit"):
        classifier.classify(b"\x89PNG" + bytes(3000), name="big.png")
    huge = png(400, 300)  # compresses to a few hundred bytes, but declares 120,000 pixels
    assert len(huge) < 2000
    with pytest.raises(BadImageError, match=r"400 x 300 pixels is above the limit of 0 megapixels"):
        classifier.classify(huge)
    with pytest.raises(BadImageError, match="not an image"):
        classifier.classify(b"hello, world", name="notes.txt")
    assert classifier.classify(png(40, 30)).top  # within both limits


@pytest.mark.fault("bad-input")
def test_a_model_without_head_is_refused():
    with pytest.raises(ValueError, match="no classifier head"):
        ImageClassifier(
            vitlab.create_model(
                ViTConfig(image_size=32, patch_size=8, dim=32, depth=1, num_heads=2, mlp_dim=32, num_classes=0)
            )
        )


@pytest.fixture(scope="module")
def client() -> TestClient:
    torch.manual_seed(0)
    classifier = ImageClassifier(tiny_model(), Limits(max_bytes=50_000, max_pixels=2_000_000))
    with TestClient(build_app(classifier, "test")) as test_client:
        yield test_client


def test_json_endpoint_returns_top5(client):
    response = client.post("/predict", content=png(), headers={"Content-Type": "application/octet-stream"})
    assert response.status_code == 200
    top = response.json()["top"]
    assert len(top) == 5 and {entry["label"] for entry in top} <= set(NAMES)
    probs = [entry["prob"] for entry in top]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0 + 1e-6


@pytest.mark.fault("bad-input")
@pytest.mark.parametrize(
    "body, status, message",
    [
        (b"GIF89a but not really", 400, "request body: "),
        (b"", 400, "empty request body"),
        (bytes(60_000), 413, "above the upload limit of 0 MiB"),
    ],
    ids=["not-an-image", "empty", "too-large"],
)
def test_json_endpoint_errors(client, body, status, message):
    response = client.post("/predict", content=body)
    assert response.status_code == status
    assert message in response.json()["error"]


def test_page_is_served_next_to_the_endpoint(client):
    response = client.get("/")
    assert response.status_code == 200 and "gradio" in response.text.lower()


def test_only_loopback_addresses_count_as_local():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4")


@pytest.mark.fault("bad-input")
@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--ckpt", "{tmp}/nowhere"], "nowhere: no such file or folder"),
        (["--ckpt", "{tmp}/ckpt", "--port", "70000"], "argument --port: must be in [1, 65535], got 70000"),
        (["--ckpt", "{tmp}/ckpt", "--max-upload-mb", "0"], "argument --max-upload-mb: must be > 0 and finite, got 0"),
        (
            ["--ckpt", "{tmp}/ckpt", "--max-upload-mb", "nan"],
            "argument --max-upload-mb: must be > 0 and finite, got nan",
        ),
        (
            ["--ckpt", "{tmp}/ckpt", "--max-megapixels", "inf"],
            "argument --max-megapixels: must be > 0 and finite, got inf",
        ),
        (["--ckpt", "{tmp}/ckpt", "--max-upload-mb", "1e-9"], "--max-upload-mb and --max-megapixels must be positive"),
    ],
)
def test_serve_command_refuses_bad_arguments_in_one_line(tmp_path, capsys, arguments, message):
    vitlab.save_pretrained(tiny_model(), tmp_path / "ckpt")
    try:
        status = main(["serve", *[a.replace("{tmp}", str(tmp_path)) for a in arguments]])
    except SystemExit as exit:  # argparse's own refusal of the flag's value
        status = exit.code
    err = capsys.readouterr().err
    assert status == 2 and message in err and err.count("\n") == 1, err
