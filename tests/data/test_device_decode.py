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
from vitlab.data.randaugment import FILL, OPERATIONS
from vitlab.data.tensor_randaugment import TENSOR_OPERATIONS

pytestmark = pytest.mark.unit

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


def test_the_keras_layers_are_not_run_on_the_device():
    plain = dict(randaugment=(2, 10), rotation=0.0, zoom=0.0, reprob=0.25)
    assert unsupported_augmentation(SimpleNamespace(**plain)) is None
    assert unsupported_augmentation(SimpleNamespace(**{**plain, "zoom": 0.1})) == "zoom"
    assert unsupported_augmentation(SimpleNamespace(**{**plain, "rotation": 10.0})) == "rotation"


@pytest.mark.parametrize("name", list(OPERATIONS))
@pytest.mark.parametrize("sign", [1, -1])
def test_each_tensor_operation_is_the_pil_ones(name, sign):
    """Within rounding (and, for the geometric ones, the bicubic kernel's a) of the PIL operation."""
    pil = Image.fromarray(PIXELS).resize((40, 32), Image.Resampling.BICUBIC)  # smooth: no aliasing to compare
    tensor = torch.from_numpy(np.array(pil)).permute(2, 0, 1).contiguous()
    operation, argument = OPERATIONS[name], OPERATIONS[name].level(9.0)
    if operation.signed:
        argument = sign * argument
    expected = torch.from_numpy(np.array(operation.apply(pil, argument, Image.Resampling.BICUBIC, FILL)))
    got = TENSOR_OPERATIONS[name](tensor, argument, "bicubic", FILL)
    assert got.dtype == torch.uint8 and got.shape == tensor.shape
    difference = (got.permute(1, 2, 0).float() - expected.float()).abs()
    assert difference.mean() <= 1.0 and difference.max() <= 6, (difference.mean(), difference.max())
    change = (expected.float() - torch.from_numpy(np.array(pil)).float()).abs().mean()
    assert change < 1 or difference.mean() < change / 4, "closer to the input than to PIL's output"


def test_files_that_are_not_jpeg_are_decoded_as_the_cpu_pipeline_decodes_them():
    """A PNG with transparency (composited onto white by read_image) alone in a batch: no JPEG to decode."""
    rgba = np.dstack([PIXELS, np.full(PIXELS.shape[:2], 0, np.uint8)])  # fully transparent: white
    buffer = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buffer, "PNG")
    header = read_header(buffer.getvalue(), "clear.png")
    sample = EncodedSample(
        torch.frombuffer(bytearray(header[0]), dtype=torch.uint8), "clear.png", 1, (0, 0, 5, 7), False
    )
    batch = DevicePipeline((5, 7), (0.5,) * 3, (0.5,) * 3)([sample], torch.device("cpu"))
    assert batch.shape == (1, 3, 5, 7) and torch.equal(batch, torch.ones_like(batch))  # white: (1 - 0.5) / 0.5
