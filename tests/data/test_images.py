"""read_image on every kind of odd-but-valid and undecodable file, written here in the real formats."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageOps

from helpers import (
    BAD_IMAGES,
    ODD_IMAGES,
    animated_gif,
    encode,
    exif_rotated_jpeg,
    noise,
    palette_with_transparency,
    rgba_half_transparent,
    sixteen_bit_grey,
    truncated,
)
from vitlab.data import BadImageError, read_image
from vitlab.data.images import MAX_IMAGE_PIXELS, _to_rgb, check_image


@pytest.mark.unit
@pytest.mark.fault("images")
@pytest.mark.parametrize("name", sorted(ODD_IMAGES))
def test_odd_but_valid_images_become_rgb(name):
    image = read_image(ODD_IMAGES[name](), name=name)
    assert image.mode == "RGB"
    assert image.width >= 1 and image.height >= 1


@pytest.mark.unit
def test_conversions_keep_what_the_image_shows():
    assert read_image(exif_rotated_jpeg()).size == (16, 24)  # stored 24 x 16, displayed rotated
    palette = np.asarray(read_image(palette_with_transparency()))
    assert palette[0, 0].tolist() == [255, 255, 255] and palette[1, 1].tolist() == [255, 0, 0]
    rgba = np.asarray(read_image(rgba_half_transparent()))
    assert rgba[0, 0].tolist() == [255, 255, 255] and rgba[1, 1].tolist() == [255, 0, 0]
    assert np.asarray(read_image(sixteen_bit_grey()))[0, :, 0].tolist() == [0, 128, 255, 1]
    assert np.asarray(read_image(animated_gif()))[0, 0].tolist() == [255, 0, 0]  # first frame
    assert np.asarray(read_image(ODD_IMAGES["cmyk.jpg"]()))[0, 0].tolist() == [255, 255, 255]


@pytest.mark.unit
@pytest.mark.fault("images")
@pytest.mark.parametrize("name", sorted(BAD_IMAGES))
def test_undecodable_images_raise_bad_image_error(tmp_path, name):
    data, reason = BAD_IMAGES[name]
    path = tmp_path / name
    path.write_bytes(data())
    with pytest.raises(BadImageError) as caught:
        read_image(path)
    assert caught.value.name == str(path)
    assert reason in caught.value.reason
    with pytest.raises(BadImageError):
        check_image(path, decode=True)


@pytest.mark.unit
def test_bomb_sizes_straddle_the_limit():
    assert 10_000 * 10_000 > MAX_IMAGE_PIXELS and 20_000 * 20_000 > 2 * MAX_IMAGE_PIXELS
    assert Image.MAX_IMAGE_PIXELS == MAX_IMAGE_PIXELS


@pytest.mark.unit
@pytest.mark.fault("images")
def test_header_check_is_fooled_only_by_a_truncated_jpeg(tmp_path):
    check_image(truncated(encode(noise((32, 32)), "JPEG", quality=95)), decode=False)  # passes headers
    for name in ("empty.jpg", "truncated.png", "text_not_image.png", "bomb.png", "mild_bomb.png"):
        with pytest.raises(BadImageError):
            check_image(BAD_IMAGES[name][0](), decode=False)


@pytest.mark.unit
@pytest.mark.fault("images", kinds=2)
def test_missing_file_and_folder_are_bad_images(tmp_path):
    with pytest.raises(BadImageError, match="cannot read"):
        read_image(tmp_path / "nope.jpg")
    with pytest.raises(BadImageError, match="a folder, not a regular file"):
        read_image(tmp_path)


@pytest.mark.unit
def test_bad_image_error_survives_pickling():
    import pickle

    error = pickle.loads(pickle.dumps(BadImageError("a.jpg", "empty file (0 bytes)")))
    assert (error.name, error.reason, str(error)) == ("a.jpg", "empty file (0 bytes)", "a.jpg: empty file (0 bytes)")


# Seeds: real images whose bytes hypothesis then flips, cuts and extends.
SEEDS = [encode(noise((8, 8)), fmt) for fmt in ("PNG", "JPEG", "GIF", "BMP", "TIFF", "WEBP")]


@st.composite
def mangled_images(draw):
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(0, 4))):
        position = draw(st.integers(0, len(data) - 1))
        data[position] = draw(st.integers(0, 255))
    cut = draw(st.integers(1, len(data)))
    return bytes(data[:cut]) + draw(st.binary(max_size=16))


@pytest.mark.integration
@pytest.mark.fault("images")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=512), mangled_images()))
def test_arbitrary_bytes_give_rgb_or_bad_image_error(data):
    try:
        image = read_image(data)
    except BadImageError as error:
        assert error.name == "<bytes>" and error.reason
    else:
        assert image.mode == "RGB" and image.width * image.height >= 1


@pytest.mark.unit
def test_read_image_gives_the_pixels_of_the_copying_steps_it_replaced():
    """read_image turns and keeps RGB images in place; the pixels are those of exif_transpose's copy
    converted to RGB, as it returned before."""
    pixels = np.random.default_rng(0).integers(0, 256, (6, 10, 3), dtype=np.uint8)
    for orientation, fmt in ((6, "JPEG"), (1, "JPEG"), (3, "PNG")):
        exif = Image.Exif()
        exif[0x0112] = orientation
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, fmt, exif=exif.tobytes())
        with Image.open(io.BytesIO(buffer.getvalue())) as image:
            old = np.asarray(_to_rgb(ImageOps.exif_transpose(image), "old"))
        new = read_image(buffer.getvalue())
        assert new.mode == "RGB" and np.array_equal(np.asarray(new), old), (orientation, fmt)
        assert new.size == ((6, 10) if orientation == 6 else (10, 6))
