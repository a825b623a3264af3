"""The device pipeline's pieces that need no loader: EXIF orientation, headers, bad files, the refusal list."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from vitlab.data import BadImageError
from vitlab.data.device_decode import (
    DevicePipeline,
    EncodedSample,
    orient,
    read_header,
    unsupported_augmentation,
)

PIXELS = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)  # not square: turns show


def jpeg(orientation: int = 1, pixels: np.ndarray = PIXELS) -> bytes:
    image, exif = Image.fromarray(pixels), Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=95, exif=exif.tobytes())
    return buffer.getvalue()


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orientation_is_pils_exif_transpose(orientation):
    data = jpeg(orientation)
    shown = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))))
    stored = torch.from_numpy(np.array(Image.open(io.BytesIO(data)))).permute(2, 0, 1)
    assert torch.equal(orient(stored, orientation).permute(1, 2, 0), torch.from_numpy(shown))
    _, width, height, found, _ = read_header(data, "x.jpg")
    assert (found, width, height) == (orientation, shown.shape[1], shown.shape[0])


@pytest.mark.fault("bad-image", kinds=1)
@pytest.mark.parametrize("kind", ["empty", "not an image", "truncated"])
def test_unreadable_headers_and_files_are_named(kind):
    whole = jpeg(pixels=np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    data = {"empty": b"", "not an image": b"not an image at all", "truncated": whole[: len(whole) // 2]}[kind]
    if kind != "truncated":
        with pytest.raises(BadImageError, match="bad.jpg"):
            read_header(data, "bad.jpg")
        return
    header = read_header(data, "bad.jpg")  # a truncated JPEG passes the header check: the decoder names it
    sample = EncodedSample(torch.frombuffer(bytearray(header[0]), dtype=torch.uint8), "bad.jpg", 1, (0, 0, 2, 2), False)
    with pytest.raises(BadImageError, match="bad.jpg"):
        DevicePipeline((4, 4), (0.5,) * 3, (0.5,) * 3)([sample], torch.device("cpu"))


def test_only_crop_and_flip_are_run_on_the_device():
    plain = dict(randaugment=None, rotation=0.0, zoom=0.0, reprob=0.0)
    assert unsupported_augmentation(SimpleNamespace(**plain)) is None
    assert unsupported_augmentation(SimpleNamespace(**{**plain, "randaugment": (2, 10)})) == "randaugment"
    assert unsupported_augmentation(SimpleNamespace(**{**plain, "reprob": 0.25})) == "reprob"
