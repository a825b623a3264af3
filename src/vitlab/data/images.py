"""Reading one image file into RGB, the only place vitlab decodes user images.

Odd but valid images (grayscale, palette with transparency, RGBA, CMYK, 16-bit, float, EXIF-rotated,
animated, a misleading extension) come back as plain RGB; greyscale beyond 8 bits by the rule in
_grey_levels. Anything that cannot be decoded raises
BadImageError(name, reason); callers decide whether to skip it. Only raster formats found in image
datasets are opened: EPS, for one, would hand the file to Ghostscript.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageOps

from vitlab.bounded_read import open_regular, read_bounded, regular_size
from vitlab.errors import RefusedFileError

# PIL refuses images above twice this many pixels and only warns above it; vitlab refuses both
# (read_image turns the warning into an error). 89.5M pixels, PIL's own default, is e.g. 9460 x 9460:
# well above any training image, well below what fills the memory of a data-loader worker.
MAX_IMAGE_PIXELS = 89_478_485
Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS

# The evaluation resize keeps the aspect ratio (shorter side to the model's size): a 2 KB PNG of
# 2,000,000 x 1 pixels passes the pixel limit and then asks that resize for gigabytes, one per
# megapixel of width. Panoramas reach about 10:1; beyond 100:1 a picture is no photograph, and the
# resized image stays below 100 x the model's input.
MAX_ASPECT_RATIO = 100

FORMATS = (
    "JPEG",
    "PNG",
    "GIF",
    "BMP",
    "DIB",
    "TIFF",
    "WEBP",
    "PPM",
    "ICO",
    "TGA",
    "JPEG2000",
    "PCX",
    "SGI",
    "PSD",
    "QOI",
    "AVIF",
)  # fmt: skip  (JPEG covers MPO, the multi-picture JPEG of some cameras)

# What a file's bytes can encode: a lossless codec packs at most about 1,000 (deflate: PNG, TIFF) to
# 2,700 (LZW: GIF) pixels per byte, a photograph under ten. A header that declares more than this many
# pixels per byte of its file is lying about its size, and decoding would allocate them before the
# data runs out; below MIN_DECLARED_PIXELS (a flat 1448 x 1448 image in a tiny file) it costs too little to matter.
MAX_PIXELS_PER_BYTE = 4096
MIN_DECLARED_PIXELS = 2**21

# A file above this is refused before it is read: an uncompressed 16-bit RGBA image at the pixel limit
# is 716 MB, and any compressed photo far less.
MAX_IMAGE_FILE_BYTES = 2**30

# Files that the folder sources consider images: what PIL reads, plus formats it does not, so that a
# .heic among the .jpg files is reported as unreadable rather than silently ignored.
IMAGE_EXTENSIONS = frozenset(
    {ext for ext, fmt in Image.registered_extensions().items() if fmt in FORMATS + ("MPO",)}
    | {".heic", ".heif", ".jxl", ".svg", ".eps", ".raw", ".cr2", ".nef", ".dng", ".arw"}
)

Source = str | os.PathLike | bytes | bytearray | memoryview
BACKGROUND = (255, 255, 255)  # transparent pixels are composited onto white


class BadImageError(ValueError):
    """An image that cannot be decoded; `name` is the file (or shard member), `reason` says why."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason

    def __reduce__(self):  # keep both fields when a DataLoader worker sends the error back
        return (type(self), (self.name, self.reason))


def read_image_file(path: str | os.PathLike, name: str | None = None) -> bytes:
    """The encoded bytes of an image file, within the bounded-read rule; BadImageError says why not."""
    name = os.fsdecode(path) if name is None else name
    try:
        return read_bounded(path, MAX_IMAGE_FILE_BYTES, "an image file")
    except RefusedFileError as error:
        raise BadImageError(name, error.reason) from None
    except OSError as error:
        raise BadImageError(name, f"cannot read file ({error.strerror or error})") from None


@contextlib.contextmanager
def _open(source: Source, name: str) -> Iterator[Image.Image]:
    """The image, its decoder reading from the bytes or from the file as it goes (PIL reads a header
    before the pixels: a file that is not an image costs a few bytes, whatever its size)."""
    with contextlib.ExitStack() as stack:
        if isinstance(source, (bytes, bytearray, memoryview)):
            handle: BinaryIO = io.BytesIO(bytes(source))
        else:
            try:
                handle = stack.enter_context(open_regular(source, MAX_IMAGE_FILE_BYTES, "an image file"))
            except RefusedFileError as error:
                raise BadImageError(name, error.reason) from None
            except OSError as error:
                raise BadImageError(name, f"cannot read file ({error.strerror or error})") from None
        file_bytes = handle.seek(0, io.SEEK_END)
        if file_bytes == 0:
            raise BadImageError(name, "empty file (0 bytes)")
        handle.seek(0)
        try:
            image = stack.enter_context(Image.open(handle, formats=FORMATS))
        except Image.UnidentifiedImageError:
            raise BadImageError(name, "not an image, or a format vitlab does not read") from None
        check_size(image.width, image.height, name, file_bytes)
        yield image


def _to_rgb(image: Image.Image, name: str) -> Image.Image:
    if image.mode.startswith("I") or image.mode == "F":
        image = Image.fromarray(_grey_levels(np.array(image, dtype=np.float32), image.mode, name), "L")
    if image.mode == "P" and "transparency" in image.info or image.mode in ("PA", "LA", "La", "RGBa"):
        image = image.convert("RGBA")
    if image.mode == "RGBA":
        background = Image.new("RGBA", image.size, BACKGROUND + (255,))
        image = Image.alpha_composite(background, image)
    return image.convert("RGB")


def _grey_levels(pixels: np.ndarray, mode: str, name: str) -> np.ndarray:
    """A 16-bit, 32-bit integer or float greyscale image as 8-bit grey, by the range its values lie in:
    a 16-bit file, or values above 255, span 0..65535; float values within 0..1 span 0..1; other values
    within 0..255 are grey levels. Negative, non-finite or larger values say nothing certain about
    brightness: refused by name."""
    low, high = (float(pixels.min()), float(pixels.max())) if pixels.size else (0.0, 0.0)
    if not (math.isfinite(low) and math.isfinite(high)) or low < 0 or high > 65535:
        raise BadImageError(name, f"{mode} pixel values span {low:g}..{high:g}; vitlab reads 0..1, 0..255 or 0..65535")
    if mode.startswith("I;16") or high > 255:
        pixels /= 257.0
    elif mode == "F" and high <= 1.0:
        pixels *= 255.0
    pixels += 0.5
    return np.clip(pixels, 0, 255, out=pixels).astype(np.uint8)


@contextlib.contextmanager
def _decoding(name: str) -> Iterator[None]:
    """Turn whatever a PIL decoder raises (OSError, SyntaxError, struct.error, EOFError, ...) into
    BadImageError, and PIL's decompression-bomb warning into a refusal.

    The warning filters are process-wide while this runs (Python's catch_warnings), so decode
    in processes (DataLoader workers), not in concurrent threads of one process.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PIL's notes about odd EXIF or palettes are not failures
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            yield
        except BadImageError:
            raise
        except (Image.DecompressionBombWarning, Image.DecompressionBombError) as error:
            raise BadImageError(name, f"too many pixels, a possible decompression bomb ({error})") from None
        except MemoryError:
            raise BadImageError(name, "too large to decode in memory") from None
        except Exception as error:
            reason = str(error) or type(error).__name__
            if "truncat" in reason.lower() or isinstance(error, EOFError):
                reason = f"truncated file: {reason}"
            raise BadImageError(name, reason) from None


def _name(source: Source, name: str | None) -> str:
    if name is not None:
        return name
    return "<bytes>" if isinstance(source, (bytes, bytearray, memoryview)) else str(source)


def read_image(source: Source, *, name: str | None = None, draft: int | None = None) -> Image.Image:
    """Decode a file path or encoded bytes into an RGB PIL image, or raise BadImageError.

    Applies the EXIF orientation, takes the first frame of an animation and composites
    transparency onto white. `draft=S` lets a JPEG decode at 1/2, 1/4 or 1/8 scale when both sides
    stay at least S pixels (PIL's Image.draft): faster, but other pixels than a full decode resized,
    so only prediction offers it (`vitlab predict --draft`), never evaluation or training.
    """
    name = _name(source, name)
    with _decoding(name), _open(source, name) as image:
        if draft is not None and image.format == "JPEG":
            image.draft(image.mode, (draft, draft))
        image.seek(0)  # animated GIF/WebP/APNG, multi-page TIFF: the first frame
        image.load()
        ImageOps.exif_transpose(image, in_place=True)  # in place: no copy when there is nothing to turn
        return image if image.mode == "RGB" else _to_rgb(image, name)  # RGB already: no converted copy


def check_size(width: int, height: int, name: str, file_bytes: int | None = None) -> None:
    """Refuse, from the header's size alone, an image whose decoding or resizing would take far more
    memory than the model needs: too many pixels, too extreme an aspect ratio, or (given the file's
    size) more pixels than its bytes can encode."""
    if width * height > MAX_IMAGE_PIXELS:  # in case PIL's own limit was raised
        raise BadImageError(
            name, f"{width} x {height} pixels is above the decompression-bomb limit of {MAX_IMAGE_PIXELS}"
        )
    if width <= 0 or height <= 0:
        raise BadImageError(name, f"{width} x {height} pixels: an empty image")
    if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
        ratio = max(width, height) / min(width, height)
        raise BadImageError(
            name,
            f"{width} x {height} pixels: aspect ratio {ratio:,.0f}:1 is above {MAX_ASPECT_RATIO}:1 "
            "(resizing its shorter side to the model's size would take gigabytes)",
        )
    if file_bytes is not None and width * height > max(MIN_DECLARED_PIXELS, MAX_PIXELS_PER_BYTE * file_bytes):
        raise BadImageError(
            name,
            f"its header declares {width} x {height} pixels, more than {MAX_PIXELS_PER_BYTE} per byte of its "
            f"{file_bytes:,}-byte file: a damaged or forged header",
        )


def check_image(source: Source, *, name: str | None = None, decode: bool = True) -> None:
    """Raise BadImageError if `source` cannot be used; `decode=False` only parses the headers.

    A header check (PIL's verify) is fast and catches empty, foreign, oversized and, for PNG,
    truncated files; a truncated JPEG only shows when decoded.
    """
    if decode:
        read_image(source, name=name)
        return
    name = _name(source, name)
    with _decoding(name), _open(source, name) as image:
        image.verify()


def is_image_file(path: str) -> bool:
    """Whether a folder source treats `path` as an image (by extension; hidden files are not)."""
    base = os.path.basename(path)
    return not base.startswith(".") and os.path.splitext(base)[1].lower() in IMAGE_EXTENSIONS


def image_files(paths: list[str]) -> list[Path]:
    """The files named, and the image files inside the folders named (recursively, sorted)."""
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and is_image_file(str(p)))
            if not found:
                raise ValueError(f"{name}: the folder holds no image files")
            files += found
        else:
            try:
                regular_size(path, what="an image file")  # a FIFO or a device is named as such
            except FileNotFoundError:
                raise FileNotFoundError(f"{name}: no such file or folder") from None
            files.append(path)
    return files
