"""Images of extreme shape, through every entry point that reads images.

The pixel limit alone lets a 2 KB PNG of 2,000,000 x 1 pixels through, and the evaluation resize
(shorter side to the model's size, aspect ratio kept) then needs a gigabyte per megapixel of width.
read_image refuses such shapes from the header, so read_image, the dataset scan, `vitlab eval`,
`vitlab predict` and the server's /predict all answer in one line. The server is driven through its
ASGI app in process (TestClient, or the ASGI callable itself): nothing binds a socket.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from pathlib import Path

import pytest
from PIL import Image

from helpers import one_line_error
from vitlab.cli import main
from vitlab.data import BadImageError, load_datasets, read_image
from vitlab.data.images import MAX_ASPECT_RATIO, check_image
from vitlab.model import Preprocessing, ViTConfig, create_untrained

pytestmark = pytest.mark.unit

# (width, height): thin lines either way, a strip just past the limit; each a few KB as PNG.
EXTREME = [(2_000_000, 1), (1, 2_000_000), (200_000, 3), (3, 200_000), (MAX_ASPECT_RATIO * 4 + 1, 4)]
FINE = [(MAX_ASPECT_RATIO, 1), (1, MAX_ASPECT_RATIO), (40, 30)]


def png(size: tuple[int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("L", size, 200).save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("shapes")
    for width, height in EXTREME + FINE:
        (root / f"{width}x{height}.png").write_bytes(png((width, height)))
    return root


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    config = ViTConfig(
        image_size=16,
        patch_size=8,
        dim=16,
        depth=1,
        num_heads=2,
        mlp_dim=32,
        num_classes=2,
        class_names=["fine", "odd"],
        preprocessing=Preprocessing(crop_pct=1.0),
    )
    return create_untrained(config).save_pretrained(tmp_path_factory.mktemp("model") / "model")


def name(size: tuple[int, int]) -> str:
    return f"{size[0]}x{size[1]}.png"


@pytest.mark.fault("images", kinds=len(EXTREME))
def test_read_image_and_the_header_check_refuse_extreme_aspect_ratios(files):
    for size in EXTREME:
        assert len(png(size)) < 20_000
        for check in (lambda p: read_image(p), lambda p: check_image(p, decode=False)):
            with pytest.raises(BadImageError, match=rf"{size[0]} x {size[1]} pixels: aspect ratio [\d,]+:1 is above "):
                check(files / name(size))
    for size in FINE:
        assert read_image(files / name(size)).size == size


@pytest.mark.fault("images", kinds=len(EXTREME))
def test_datasets_skip_them_and_name_each_once(files, tmp_path, caplog):
    for label in ("fine", "odd"):
        (tmp_path / "data" / label).mkdir(parents=True)
    for size in FINE:
        for label in ("fine", "odd"):
            (tmp_path / "data" / label / name(size)).write_bytes(png(size))
    for size in EXTREME:
        (tmp_path / "data" / "odd" / name(size)).write_bytes(png(size))
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        splits = load_datasets(str(tmp_path / "data"), None, None, val_fraction=0.5, max_bad_fraction=0.9)
    assert len(splits.train) + len(splits.val) == 2 * len(FINE)
    for size in EXTREME:
        assert sum(name(size) in r.getMessage() and "aspect ratio" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.fault("images", kinds=1)
def test_eval_stops_in_one_line_naming_it(files, model_folder, tmp_path, capsys):
    for label in ("fine", "odd"):
        (tmp_path / "data" / label).mkdir(parents=True)
        (tmp_path / "data" / label / "a.png").write_bytes(png((40, 30)))
    (tmp_path / "data" / "odd" / "line.png").write_bytes(png(EXTREME[0]))
    line = one_line_error(capsys, ["eval", "--ckpt", str(model_folder), "--data", str(tmp_path / "data")])
    assert "line.png: 2000000 x 1 pixels: aspect ratio 2,000,000:1 is above 100:1" in line, line


@pytest.mark.fault("images", kinds=len(EXTREME))
def test_predict_skips_them_with_one_line_each(files, model_folder, capsys):
    paths = [str(files / name(size)) for size in EXTREME + FINE]
    status = main(["predict", "--ckpt", str(model_folder), *paths, "--json"])
    captured = capsys.readouterr()
    skipped = [line for line in captured.err.splitlines() if line.startswith("vitlab predict: skipping")]
    assert status == 1 and len(skipped) == len(EXTREME) and all("aspect ratio" in line for line in skipped)
    assert [Path(p["path"]).name for p in json.loads(captured.out)] == [name(size) for size in FINE]


# -- the server, in process ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def app(model_folder):
    pytest.importorskip("gradio")
    import vitlab
    from vitlab.serve import ImageClassifier, Limits
    from vitlab.serve.app import build_app

    return build_app(ImageClassifier(vitlab.load(model_folder), Limits(max_bytes=200_000)), "test")


@pytest.fixture(scope="module")
def client(app):
    from fastapi.testclient import TestClient

    with TestClient(app, base_url="http://127.0.0.1") as test_client:
        yield test_client


@pytest.mark.fault("images", kinds=2 * len(EXTREME))
def test_predict_endpoint_refuses_them_as_bytes_and_as_a_form(client):
    for size in EXTREME:
        data = png(size)
        for response in (
            client.post("/predict", content=data),
            client.post("/predict", files={"file": (name(size), data, "image/png")}),
        ):
            assert response.status_code == 400 and "aspect ratio" in response.json()["error"], response.text


def test_a_form_upload_gives_what_the_bytes_give(client):
    data = png((40, 30))
    raw = client.post("/predict", content=data)
    form = client.post("/predict", files={"file": ("x.png", data, "image/png")})
    assert raw.status_code == form.status_code == 200 and raw.json() == form.json()
    assert len(raw.json()["top"]) == 2


@pytest.mark.fault("bad-input", kinds=3)
def test_bad_forms_are_one_error_each(client):
    data = png((40, 30))
    two = client.post("/predict", files=[("a", ("a.png", data, "image/png")), ("b", ("b.png", data, "image/png"))])
    none = client.post("/predict", files={"note": (None, "a text field, no file")})
    cut = client.post(
        "/predict",
        content=b'--x\r\nContent-Disposition: form-data; name="f"; filename="a"\r\n\r\nab',
        headers={"Content-Type": "multipart/form-data; boundary=x"},
    )
    for response in (two, none, cut):
        assert response.status_code == 400 and "multipart form" in response.json()["error"], response.text


@pytest.mark.fault("disconnect", kinds=1)
def test_a_client_that_disconnects_mid_upload_is_one_log_line(app, caplog):
    """The ASGI app called directly: the body's first chunk, then the client goes away."""
    events = iter([{"type": "http.request", "body": bytes(100), "more_body": True}, {"type": "http.disconnect"}])
    sent = []

    async def receive():
        return next(events)

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/predict",
        "raw_path": b"/predict",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"image/png")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 7860),
    }
    with caplog.at_level(logging.INFO, logger="vitlab"):
        asyncio.run(app(scope, receive, send))
    lines = [r.getMessage() for r in caplog.records if "disconnect" in r.getMessage()]
    assert lines == ["POST /predict: the client disconnected after 100 bytes of the upload"]
    assert not any(r.exc_info for r in caplog.records)
