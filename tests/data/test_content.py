"""Content digests: an image is known by its bytes, whatever its path; the digests file is checked
against its header before anything is read."""

from __future__ import annotations

import io
import tracemalloc

import numpy as np
import pytest

from vitlab.data.content import DIGEST_BYTES, count_among, digests, read_digests, write_digests
from vitlab.data.datasets import ArrayImages, EncodedImages

pytestmark = pytest.mark.unit


def test_a_file_is_known_by_its_bytes_under_any_path(tmp_path):
    first, copy, other = tmp_path / "a.png", tmp_path / "sub" / "b.png", tmp_path / "c.png"
    copy.parent.mkdir()
    first.write_bytes(b"\x89PNG same bytes")
    copy.write_bytes(b"\x89PNG same bytes")
    other.write_bytes(b"\x89PNG other bytes")
    training = EncodedImages([str(first)], [0])
    write_digests(tmp_path / "train.npy", training)
    known = read_digests(tmp_path / "train.npy")
    assert count_among([EncodedImages([str(copy), str(other), str(tmp_path / "gone.png")], [0, 1, 1])], known) == 1


def test_decoded_images_are_known_by_their_pixels_and_shape():
    pixels = np.arange(2 * 4 * 6 * 3, dtype=np.uint8).reshape(2, 4, 6, 3)
    images = ArrayImages(pixels, [0, 1])
    same = ArrayImages(pixels[::-1].copy(), [1, 0], keys=["x", "y"])
    reshaped = ArrayImages(pixels.reshape(2, 6, 4, 3), [0, 1])  # the same bytes, another shape
    assert list(digests(images)) == list(digests(same))[::-1]
    assert not set(digests(images)) & set(digests(reshaped))


@pytest.mark.fault("bad-input", kinds=3)
def test_a_digests_file_that_lies_about_its_size_is_refused_before_it_is_read(tmp_path):
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "|u1", "fortran_order": False, "shape": (10**9, DIGEST_BYTES)}
    )
    (tmp_path / "huge.npy").write_bytes(header.getvalue() + bytes(32))
    np.save(tmp_path / "floats.npy", np.zeros((2, DIGEST_BYTES), dtype=np.float32))
    (tmp_path / "text.npy").write_text("not a table")
    tracemalloc.start()
    for name in ("huge.npy", "floats.npy", "text.npy"):
        with pytest.raises(ValueError, match=f"{name}: "):
            read_digests(tmp_path / name)
    assert tracemalloc.get_traced_memory()[1] < 2**20
    tracemalloc.stop()
