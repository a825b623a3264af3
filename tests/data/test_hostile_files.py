"""Image paths that are not image files: a link to /dev/zero among the training images, a FIFO, a
sparse file of gigabytes. Each is refused by name from os.stat, before anything is read. And images
beyond 8 bits: converted by the range of their values, or refused by name."""

from __future__ import annotations

import os

import numpy as np
import pytest
from PIL import Image

from helpers import SMALL_INPUT_PEAK, encode, traced_peak
from vitlab.data import BadImageError, read_image
from vitlab.data.images import image_files

pytestmark = pytest.mark.unit


def sparse(path, size: int):
    with path.open("wb") as file:
        file.write(b"\x89PNG\r\n\x1a\n")  # a PNG signature, then nothing but a hole
        file.truncate(size)
    return path


@pytest.mark.fault("hostile-input", kinds=1)  # one per parameter
@pytest.mark.timeout(60)  # a FIFO opened for reading waits for a writer: on today's main, for ever
@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda p: os.symlink("/dev/zero", p), "a character device, not a regular file"),
        (lambda p: os.mkfifo(p), "a named pipe (FIFO), not a regular file"),
        (lambda p: sparse(p, 3 * 2**30), "3,221,225,472 bytes is above the limit of 1 GiB for an image file"),
    ],
    ids=["dev-zero-link", "fifo", "3GB-sparse"],
)
def test_an_image_path_that_is_no_image_file_is_refused_before_reading(tmp_path, make, reason):
    path = tmp_path / "cat" / "x.png"
    path.parent.mkdir()
    make(path)
    raised, peak = traced_peak(lambda: read_image(path))
    assert isinstance(raised, BadImageError) and raised.reason.startswith(reason), raised
    assert peak < SMALL_INPUT_PEAK, f"{peak / 2**20:.0f} MiB traced"


@pytest.mark.fault("hostile-input", kinds=2)
def test_predict_names_a_fifo_or_device_as_such_not_as_missing(tmp_path):
    os.mkfifo(tmp_path / "pipe.jpg")
    with pytest.raises(ValueError, match="pipe.jpg: a named pipe \\(FIFO\\), not a regular file"):
        image_files([str(tmp_path / "pipe.jpg")])
    with pytest.raises(ValueError, match="/dev/null: a character device, not a regular file"):
        image_files(["/dev/null"])
    with pytest.raises(FileNotFoundError, match="nowhere.jpg: no such file or folder"):
        image_files([str(tmp_path / "nowhere.jpg")])


@pytest.mark.fault("hostile-input", kinds=2)
def test_float_greyscale_is_converted_by_its_range_or_refused_by_name():
    ramp = np.linspace(0.0, 1.0, 8 * 16, dtype=np.float32).reshape(8, 16)
    grey = np.asarray(read_image(encode(Image.fromarray(ramp, "F"), "TIFF"), name="ramp.tif"))
    assert grey.shape == (8, 16, 3) and grey.min() == 0 and grey.max() == 255  # 0..1 is black to white
    assert np.array_equal(grey[..., 0], np.round(ramp * 255).astype(np.uint8))
    levels = np.asarray(read_image(encode(Image.fromarray(ramp * 200, "F"), "TIFF")))[..., 0]
    assert levels.max() == 200  # 0..255: grey levels as they are
    with pytest.raises(BadImageError, match=r"odd.tif: F pixel values span -1..1; vitlab reads 0..1, 0..255"):
        read_image(encode(Image.fromarray(ramp * 2 - 1, "F"), "TIFF"), name="odd.tif")
