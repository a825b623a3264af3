"""Map-style datasets of (image, label) that decode in the DataLoader's workers.

Two kinds of storage: decoded pixels already in memory (digits, CIFAR) and encoded images read on
demand (files, tar shards). Both apply the split's transform in `__getitem__`, hold only paths,
offsets and arrays, and so pickle cheaply into worker processes.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from .images import BadImageError, check_image, read_image, read_image_file

logger = logging.getLogger("vitlab")

Transform = Callable[[Image.Image], Any] | None
Indices = Sequence[int] | np.ndarray  # positions into a dataset, as a list or an integer array


class TooManyBadImagesError(ValueError):
    """More than the allowed fraction of a split cannot be decoded."""


class LabelledImages(torch.utils.data.Dataset):
    """What the splitting code relies on in every vitlab source: integer `labels` (one per image), the
    `transform` that `__getitem__` applies, `subset`, a copy of some images with another transform, and
    `sample_keys`, a name per image within its source."""

    labels: list[int]
    transform: Transform

    def __len__(self) -> int:
        raise NotImplementedError

    def sample_keys(self) -> list[str]:
        raise NotImplementedError

    def subset(self, indices: Indices, transform: Transform) -> LabelledImages:
        raise NotImplementedError

    def content(self, index: int) -> bytes:
        """The bytes image `index` is made of, whatever its key: what tells one image from another."""
        raise NotImplementedError

    def fingerprint(self) -> str:
        """The images and labels in a few words: their count and the sha256 of their keys and labels, in order."""
        digest = hashlib.sha256()
        for key, label in zip(self.sample_keys(), self.labels, strict=True):
            digest.update(f"{key}\t{label}\n".encode("utf-8", "surrogateescape"))
        return f"{len(self)} images, sha256 {digest.hexdigest()[:16]}"


class ArrayImages(LabelledImages):
    """Images held as a uint8 array (N, H, W, 3) with integer labels (N,).

    `keys` name each image within its source (default "0".."N-1"), so that two datasets drawn from
    one source can be compared image by image (see `sample_keys`).
    """

    def __init__(
        self,
        images: np.ndarray,
        labels: Sequence[int] | np.ndarray,
        transform: Transform = None,
        keys: Sequence[str] | None = None,
    ) -> None:
        if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
            raise ValueError(f"expected uint8 images of shape (N, H, W, 3), got {images.dtype} {images.shape}")
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        self.images = images
        self.labels = [int(label) for label in labels]
        self.transform = transform
        self.keys = [str(i) for i in range(len(images))] if keys is None else list(keys)

    def sample_keys(self) -> list[str]:
        return self.keys

    def content(self, index: int) -> bytes:
        """The pixels, after their shape (the same bytes in another shape are another image)."""
        image = self.images[index]
        return f"{image.shape}".encode() + image.tobytes()

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = Image.fromarray(self.images[index], "RGB")
        return (self.transform(image) if self.transform else image), self.labels[index]

    def subset(self, indices: Indices, transform: Transform) -> ArrayImages:
        rows = np.asarray(indices, dtype=np.int64)
        return ArrayImages(self.images[rows], [self.labels[i] for i in rows], transform, [self.keys[i] for i in rows])


class EncodedImages(LabelledImages):
    """Encoded images decoded on access; `sources[i]` is whatever `read` turns into bytes or a path.

    Files were checked when the dataset was built (see scan.py), but a file can change afterwards
    or be one a header check cannot judge: an image that fails here is replaced by the next good
    one, named once per process in the log, and too many failures stop the run.
    """

    def __init__(
        self,
        sources: Sequence[Any],
        labels: Sequence[int],
        transform: Transform = None,
        *,
        max_bad_fraction: float = 0.01,
        description: str = "dataset",
    ) -> None:
        if len(sources) != len(labels):
            raise ValueError(f"{len(sources)} images but {len(labels)} labels")
        self.sources = list(sources)
        self.labels = [int(label) for label in labels]
        self.transform = transform
        self.max_bad_fraction = max_bad_fraction
        self.description = description
        self._failed: set[int] = set()  # per process: each DataLoader worker holds its own copy

    def read(self, source: Any) -> Image.Image:
        """Decode one image; subclasses that store bytes elsewhere override this and `encoded`."""
        return read_image(source)

    def encoded(self, source: Any) -> bytes:
        """The file's bytes, undecoded (for decoding on the training device: device_decode.py)."""
        return read_image_file(source, str(source))

    def check(self, source: Any, decode: bool) -> None:
        """Raise BadImageError if `source` cannot be used (`decode=False`: headers only)."""
        check_image(source, decode=decode)

    def key(self, source: Any) -> str:
        """The same string for the same file however its path was spelled."""
        return os.path.realpath(source)

    def sample_keys(self) -> list[str]:
        return [self.key(source) for source in self.sources]

    def content(self, index: int) -> bytes:
        """The file's (or shard member's) bytes as stored; BadImageError if they cannot be read."""
        return self.encoded(self.sources[index])

    def __len__(self) -> int:
        return len(self.sources)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        return self.first_readable(index, self.read, self.transform)

    def first_readable(self, index: int, read: Callable[[Any], Any], transform: Callable | None) -> tuple[Any, int]:
        """(transform(read(source)), label) of image `index`, or of the next one that `read` can read."""
        for offset in range(len(self.sources)):
            candidate = (index + offset) % len(self.sources)
            if candidate in self._failed:
                continue
            try:
                image = read(self.sources[candidate])
            except BadImageError as error:
                self._record_failure(candidate, error)
                continue
            label = self.labels[candidate]
            return (transform(image) if transform else image), label
        raise TooManyBadImagesError(f"no image in {self.description} can be decoded")

    def _record_failure(self, index: int, error: BadImageError) -> None:
        self._failed.add(index)
        logger.warning("skipping unreadable image %s: %s", error.name, error.reason)
        if len(self._failed) > self.max_bad_fraction * len(self.sources):
            raise TooManyBadImagesError(
                f"{len(self._failed)} of {len(self.sources)} images in {self.description} cannot be "
                f"decoded (limit {self.max_bad_fraction:.0%}), e.g. {error}"
            )

    def subset(self, indices: Indices, transform: Transform) -> EncodedImages:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.sources = [self.sources[i] for i in indices]
        clone.labels = [self.labels[i] for i in indices]
        clone.transform = transform
        clone._failed = set()
        return clone
