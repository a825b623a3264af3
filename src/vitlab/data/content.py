"""What a split's images are, whatever their paths: a digest of each image's bytes.

A run records the digests of its training images when it starts (`write_digests`); evaluation digests
the images it scores and counts those among them (`count_among`), so that a training image is found
under any path: in a copy of the folder, renamed, or after the folder changed in place. Files and
shard members are digested as stored, images held decoded (digits, CIFAR) as their pixels; the same
picture re-encoded is another file and is not found.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from vitlab.bounded_read import open_regular
from vitlab.errors import RefusedFileError
from vitlab.npy_files import check_holds, read_data, read_header

from .datasets import LabelledImages
from .images import BadImageError

log = logging.getLogger("vitlab")

DIGEST_BYTES = 16  # BLAKE2b-128: two different images collide with probability 2^-128
# Threads that read the files: reading, not hashing, is the cost, and hashlib releases the GIL.
READERS = 8


def _digest(dataset: LabelledImages, index: int) -> bytes | None:
    try:
        return hashlib.blake2b(dataset.content(index), digest_size=DIGEST_BYTES).digest()
    except BadImageError:  # the evaluation, or write_digests, names it
        return None


def digests(dataset: LabelledImages) -> Iterator[bytes | None]:
    """The digest of each image of `dataset`, in order; None for one that cannot be read."""
    with ThreadPoolExecutor(max_workers=READERS) as pool:
        yield from pool.map(lambda index: _digest(dataset, index), range(len(dataset)))


def write_digests(path: Path, dataset: LabelledImages) -> int:
    """Write the digests of `dataset`'s readable images to `path` (.npy, uint8 rows of DIGEST_BYTES,
    in the dataset's order); their count."""
    rows = [row for row in digests(dataset) if row is not None]
    if len(rows) < len(dataset):
        log.warning(
            "%s: %d of %d images could not be read to digest", path.name, len(dataset) - len(rows), len(dataset)
        )
    array = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), DIGEST_BYTES)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
    with open(temporary, "wb") as file:
        np.save(file, array, allow_pickle=False)
    os.replace(temporary, path)
    return len(rows)


def read_digests(path: Path) -> set[bytes]:
    """The digests `write_digests` wrote to `path`. RefusedFileError (a ValueError) for a file that is not
    such a table, its header checked against its bytes before anything is read into memory."""
    name = os.fsdecode(path)
    with open_regular(path, what="a table of image digests") as handle:
        header = read_header(handle, name)
        check_holds(header, os.fstat(handle.fileno()).st_size - header.offset, name)
        if header.dtype != np.uint8 or len(header.shape) != 2 or header.shape[1] != DIGEST_BYTES:
            raise RefusedFileError(name, f"not a table of {DIGEST_BYTES}-byte image digests ({header.describe()})")
        table = read_data(handle, header, name)
    return {row.tobytes() for row in table}


def count_among(datasets: Sequence[LabelledImages], known: set[bytes]) -> int:
    """How many images of `datasets` have a digest in `known` (unreadable ones are not counted)."""
    return sum(row in known for dataset in datasets for row in digests(dataset) if row is not None)
