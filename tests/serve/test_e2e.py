"""End to end: `vitlab serve` on loopback, driven by headless Chromium (Debian's, which `make browser`
installs) and by an HTTP client; no request may leave the machine."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import httpx
import pytest
from PIL import Image, ImageDraw

import vitlab
from helpers import CHROMIUM, CHROMIUM_ARGS, REPO_ROOT, randomise_, require_chromium, serving
from vitlab.model import ViTConfig
from vitlab.serve import ImageClassifier

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
START_TIMEOUT_S = 120
UI_TIMEOUT_MS = 60_000


def scene() -> bytes:
    """A small picture with structure: sky, ground, a sun and a house."""
    image = Image.new("RGB", (96, 72), (110, 170, 230))
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 50, 96, 72), fill=(70, 140, 60))
    draw.ellipse((66, 6, 86, 26), fill=(250, 220, 60))
    draw.rectangle((14, 32, 44, 56), fill=(180, 60, 50))
    draw.polygon([(10, 32), (29, 18), (48, 32)], fill=(90, 40, 30))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`vitlab serve` in its own process on a free loopback port; yields (base URL, checkpoint)."""
    folder = tmp_path_factory.mktemp("serve")
    config = ViTConfig(
        image_size=32,
        patch_size=8,
        dim=64,
        depth=2,
        num_heads=4,
        mlp_dim=128,
        num_classes=len(NAMES),
        class_names=NAMES,
        name="Ti-demo",
    )
    vitlab.save_pretrained(randomise_(vitlab.create_model(config)), folder / "ckpt")
    with serving([sys.executable, "-m", "vitlab"], folder / "ckpt", folder / "serve.log", cwd=REPO_ROOT) as base:
        yield base, folder / "ckpt"


def expected_top(checkpoint: Path, data: bytes) -> list[tuple[str, float]]:
    return ImageClassifier(vitlab.load(checkpoint)).classify(data, with_overlay=False).top


def test_json_endpoint_over_http(server):
    base, checkpoint = server
    data = scene()
    response = httpx.post(base + "/predict", content=data, headers={"Content-Type": "image/png"}, timeout=60)
    assert response.status_code == 200
    top = response.json()["top"]
    expected = expected_top(checkpoint, data)
    assert [entry["label"] for entry in top] == [label for label, _ in expected]
    assert [entry["prob"] for entry in top] == pytest.approx([p for _, p in expected], abs=1e-5)

    refused = httpx.post(base + "/predict", content=b"%PDF-1.4 not an image", timeout=60)
    assert refused.status_code == 400 and "not an image" in refused.json()["error"]


def test_page_in_chromium_shows_top_classes_overlay_and_errors(server, tmp_path):
    from playwright.sync_api import sync_playwright

    require_chromium()
    base, checkpoint = server
    image_path, junk_path = tmp_path / "scene.png", tmp_path / "notes.txt"
    image_path.write_bytes(scene())
    junk_path.write_text("this is not an image\n")
    best, best_prob = expected_top(checkpoint, image_path.read_bytes())[0]
    outside: list[str] = []

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on(
                "request", lambda r: outside.append(r.url) if not r.url.startswith((base, "data:", "blob:")) else None
            )
            page.set_default_timeout(UI_TIMEOUT_MS)
            page.goto(base + "/")
            page.set_input_files("#upload input[type=file]", str(image_path))
            page.wait_for_selector("#overlay img[src]")
            page.wait_for_function("document.querySelector('#message').innerText.includes('%')")
            message = page.inner_text("#message")
            assert message.startswith(best) and f"{best_prob:.1%}" in message and "scene.png" in message
            assert page.inner_text("#top").splitlines()[1].strip() == best  # the label's heading is the top class
            overlay = page.locator("#overlay img")
            assert overlay.evaluate("img => img.naturalWidth") >= 32  # a decoded picture, not a broken link
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)

            page.click("#upload button[aria-label='Clear']")
            page.set_input_files("#upload input[type=file]", str(junk_path))
            page.wait_for_function("document.querySelector('#message').innerText.includes('Could not classify')")
            assert "notes.txt: not an image" in page.inner_text("#message").replace("`", "")
            assert page.locator("#overlay img[src]").count() == 0  # the previous result is gone
            page.screenshot(path=str(tmp_path / "page-error.png"), full_page=True)
        finally:
            browser.close()
    assert outside == []  # the page works offline: nothing but the server itself was asked for anything
