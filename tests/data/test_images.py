"""read_image on every kind of odd-but-valid and undecodable file, written here in the real formats."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from vitlab.data import BadImageError, read_image
from vitlab.data.images import MAX_IMAGE_PIXELS, check_image


def encode(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def noise(size=(24, 16), mode="RGB", seed=0) -> Image.Image:
    rng = np.random.default_rng(seed)
    channels = len(mode) if mode in ("RGB", "RGBA", "CMYK") else 1
    pixels = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    return Image.fromarray(pixels.squeeze(-1) if channels == 1 else pixels, mode)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims width x height pixels (1-bit grey), with a tiny IDAT: a bomb's header."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def exif_rotated_jpeg() -> bytes:
    """A 24 x 16 JPEG whose EXIF orientation 6 says "rotate 90 degrees clockwise to display"."""
    exif = Image.Exif()
    exif[0x0112] = 6
    return encode(noise(), "JPEG", exif=exif)


def palette_with_transparency() -> bytes:
    image = Image.new("P", (4, 4), 0)
    image.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)  # index 0 red, index 1 blue
    image.putpixel((0, 0), 1)
    return encode(image, "PNG", transparency=1)  # blue is transparent


def rgba_half_transparent() -> bytes:
    image = Image.new("RGBA", (4, 4), (255, 0, 0, 255))
    image.putpixel((0, 0), (0, 0, 255, 0))
    return encode(image, "PNG")


def sixteen_bit_grey() -> bytes:
    pixels = np.array([[0, 32768, 65535, 257]], dtype=np.uint16)
    return encode(Image.fromarray(pixels), "PNG")


def animated_gif() -> bytes:
    frames = [Image.new("RGB", (8, 8), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    return encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)


# file name -> bytes: valid but unusual images, each must decode to RGB and be used.
ODD_IMAGES = {
    "png_named_as.jpg": lambda: encode(noise(), "PNG"),
    "one_pixel.png": lambda: encode(Image.new("RGB", (1, 1), (10, 20, 30)), "PNG"),
    "grey.jpg": lambda: encode(noise(mode="L"), "JPEG"),
    "bilevel.bmp": lambda: encode(noise(mode="L").convert("1"), "BMP"),
    "palette_transparent.png": palette_with_transparency,
    "rgba.png": rgba_half_transparent,
    "grey_alpha.png": lambda: encode(noise(mode="L").convert("LA"), "PNG"),
    "cmyk.jpg": lambda: encode(Image.new("CMYK", (8, 8), (0, 0, 0, 0)), "JPEG"),
    "sixteen_bit.png": sixteen_bit_grey,
    "exif_rotated.jpg": exif_rotated_jpeg,
    "animated.gif": animated_gif,
    "photo.tiff": lambda: encode(noise(), "TIFF"),
    "photo.webp": lambda: encode(noise(), "WEBP"),
}


def truncated(data: bytes, keep: float = 0.6) -> bytes:
    return data[: int(len(data) * keep)]


# file name -> (bytes, words the reason must contain): each must be refused with BadImageError.
BAD_IMAGES = {
    "empty.jpg": (lambda: b"", "empty"),
    "truncated.jpg": (lambda: truncated(encode(noise((32, 32)), "JPEG", quality=95)), "truncated"),
    "truncated.png": (lambda: truncated(encode(noise((32, 32)), "PNG")), "truncated"),
    "text_not_image.png": (lambda: b"this is a caption, not a picture\n" * 4, "not an image"),
    "drawing.svg": (lambda: b'<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"/>', "not an image"),
    "phone.heic": (lambda: b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00heicmif1" + b"\0" * 64, "not an image"),
    "vector.eps": (lambda: encode(noise(mode="L"), "EPS"), "not an image"),  # would need Ghostscript
    "bomb.png": (lambda: png_header_only(20_000, 20_000), "decompression bomb"),  # > 2x the limit: PIL error
    "mild_bomb.png": (lambda: png_header_only(10_000, 10_000), "decompression bomb"),  # 1-2x: PIL only warns
    "garbage.jpg": (lambda: b"\xff\xd8\xff\xe0" + bytes(range(256)) * 3, ""),
}


@pytest.mark.fault("images")
@pytest.mark.parametrize("name", sorted(ODD_IMAGES))
def test_odd_but_valid_images_become_rgb(name):
    image = read_image(ODD_IMAGES[name](), name=name)
    assert image.mode == "RGB"
    assert image.width >= 1 and image.height >= 1


def test_conversions_keep_what_the_image_shows():
    assert read_image(exif_rotated_jpeg()).size == (16, 24)  # stored 24 x 16, displayed rotated
    palette = np.asarray(read_image(palette_with_transparency()))
    assert palette[0, 0].tolist() == [255, 255, 255] and palette[1, 1].tolist() == [255, 0, 0]
    rgba = np.asarray(read_image(rgba_half_transparent()))
    assert rgba[0, 0].tolist() == [255, 255, 255] and rgba[1, 1].tolist() == [255, 0, 0]
    assert np.asarray(read_image(sixteen_bit_grey()))[0, :, 0].tolist() == [0, 128, 255, 1]
    assert np.asarray(read_image(animated_gif()))[0, 0].tolist() == [255, 0, 0]  # first frame
    assert np.asarray(read_image(ODD_IMAGES["cmyk.jpg"]()))[0, 0].tolist() == [255, 255, 255]


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


def test_bomb_sizes_straddle_the_limit():
    assert 10_000 * 10_000 > MAX_IMAGE_PIXELS and 20_000 * 20_000 > 2 * MAX_IMAGE_PIXELS
    assert Image.MAX_IMAGE_PIXELS == MAX_IMAGE_PIXELS


@pytest.mark.fault("images")
def test_header_check_is_fooled_only_by_a_truncated_jpeg(tmp_path):
    check_image(truncated(encode(noise((32, 32)), "JPEG", quality=95)), decode=False)  # passes headers
    for name in ("empty.jpg", "truncated.png", "text_not_image.png", "bomb.png", "mild_bomb.png"):
        with pytest.raises(BadImageError):
            check_image(BAD_IMAGES[name][0](), decode=False)


@pytest.mark.fault("images", kinds=2)
def test_missing_file_and_folder_are_bad_images(tmp_path):
    with pytest.raises(BadImageError, match="cannot read"):
        read_image(tmp_path / "nope.jpg")
    with pytest.raises(BadImageError, match="cannot read"):
        read_image(tmp_path)


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
