"""The one rule for opening a file vitlab is given: a regular file, a size limit checked before
reading, and reads in bounded chunks.

A path can name a FIFO (opening it blocks until someone writes), a device (/dev/zero never ends),
or a sparse file that claims gigabytes while holding a few bytes on disk. `os.stat` says which
before anything is opened; the file is opened without blocking and checked again on the open
descriptor, so that a path swapped between the two is caught; and no read asks for more than
the limit allows, so a file that grows after its size was checked cannot get past it either.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

from vitlab.errors import RefusedFileError

CHUNK_BYTES = 1 << 20  # the most one read asks for

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def size_words(size: int) -> str:
    """1536 -> "1.5 KiB": a size for a message."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} bytes"


def _check(path: str | os.PathLike, info: os.stat_result, limit: int | None, what: str) -> int:
    if not stat.S_ISREG(info.st_mode):
        raise RefusedFileError(os.fsdecode(path), f"{_kind(info.st_mode)}, not a regular file; expected {what}")
    if limit is not None and info.st_size > limit:
        raise RefusedFileError(
            os.fsdecode(path), f"{info.st_size:,} bytes is above the limit of {size_words(limit)} for {what}"
        )
    return info.st_size


def regular_size(path: str | os.PathLike, limit: int | None = None, what: str = "a file") -> int:
    """The size of `path` (links followed) when it is a regular file of at most `limit` bytes, from
    os.stat alone: nothing is opened. FileNotFoundError and PermissionError go to the caller."""
    return _check(path, os.stat(path), limit, what)


@contextlib.contextmanager
def open_regular(path: str | os.PathLike, limit: int | None = None, what: str = "a file") -> Iterator[BinaryIO]:
    """`path` opened for reading in binary, once it is known to be a regular file within `limit`."""
    regular_size(path, limit, what)
    # O_NONBLOCK: should the path have become a FIFO since the stat, the open does not wait for a writer.
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        _check(path, os.fstat(descriptor), limit, what)
        handle = os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise
    with handle:
        yield handle


def read_at_most(handle: BinaryIO, limit: int, name: str, what: str = "a file") -> bytes:
    """What is left in `handle`, read in chunks of at most CHUNK_BYTES; more than `limit` is refused."""
    parts: list[bytes] = []
    total = 0
    while True:
        part = handle.read(min(CHUNK_BYTES, limit + 1 - total))
        if not part:
            return b"".join(parts)
        total += len(part)
        if total > limit:
            raise RefusedFileError(name, f"grew above the limit of {size_words(limit)} for {what} while being read")
        parts.append(part)


def read_bounded(path: str | os.PathLike, limit: int, what: str = "a file") -> bytes:
    """The bytes of the regular file `path`, refused by name when it is anything else or above `limit`."""
    with open_regular(path, limit, what) as handle:
        return read_at_most(handle, limit, os.fsdecode(path), what)
