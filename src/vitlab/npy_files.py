""".npy and .npz files read header first: what an array's header declares is checked against the bytes
that hold it, and against a limit, before anything is allocated.

numpy allocates the shape a .npy header declares before it reads the data: a 64-byte member that
declares `shape (2**36,)` asks for 256 GiB. Here the declared size must be exactly what the member
holds after its header (so it costs no more than the file), the total must fit the caller's limit,
and object arrays (which would need pickle) are refused by name. The data is then read in bounded
chunks into an array of that checked size.
"""

from __future__ import annotations

import contextlib
import math
import os
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from vitlab.bounded_read import CHUNK_BYTES, open_regular, size_words
from vitlab.errors import RefusedFileError

MAX_HEADER_BYTES = 10_000  # numpy's own default bound on a header's length
NPZ_FORMAT = "an .npz of arrays"


@dataclass(frozen=True)
class ArrayHeader:
    """What a .npy header declares, and where its data starts."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    offset: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize  # Python ints: no overflow

    def describe(self) -> str:
        return f"{self.dtype} {self.shape}"


def read_header(handle: BinaryIO, name: str) -> ArrayHeader:
    """The header of the .npy at the start of `handle` (left just after it); RefusedFileError names
    what is wrong with it, including an object dtype, which only pickle could read."""
    start = handle.tell()
    try:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(handle, MAX_HEADER_BYTES)
        else:
            shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(handle, MAX_HEADER_BYTES)
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as error:
        raise RefusedFileError(name, f"not a readable .npy array header ({error})".replace("\n", " ")) from None
    if dtype.hasobject:
        raise RefusedFileError(name, f"holds pickled objects (dtype {dtype}), which vitlab never loads")
    return ArrayHeader(tuple(shape), dtype, fortran_order, handle.tell() - start)


def check_holds(header: ArrayHeader, data_bytes: int, name: str) -> None:
    """Refuse a header whose array does not take exactly the `data_bytes` that follow it."""
    if header.nbytes != data_bytes:
        cut = " (cut short)" if header.nbytes > data_bytes else ""
        raise RefusedFileError(
            name,
            f"its header declares {header.describe()}, {header.nbytes:,} bytes, but {data_bytes:,} bytes "
            f"follow it{cut}",
        )


def read_data(handle: BinaryIO, header: ArrayHeader, name: str) -> np.ndarray:
    """The array whose (checked) header was just read: its bytes read in chunks into one buffer."""
    buffer = bytearray(header.nbytes)
    view = memoryview(buffer)
    done = 0
    while done < header.nbytes:
        part = handle.read(min(CHUNK_BYTES, header.nbytes - done))
        if not part:
            raise RefusedFileError(name, f"cut short: {done:,} of the {header.nbytes:,} bytes its header declares")
        view[done : done + len(part)] = part
        done += len(part)
    if handle.read(1):
        raise RefusedFileError(name, f"holds more than the {header.nbytes:,} bytes its header declares")
    array = np.frombuffer(buffer, dtype=header.dtype)
    return array.reshape(header.shape, order="F" if header.fortran_order else "C")


def npy_header(path: str | os.PathLike, what: str = "an .npy array") -> ArrayHeader:
    """The header of the .npy file `path`, checked to declare exactly the bytes that follow it."""
    with open_regular(path, what=what) as handle:
        size = os.fstat(handle.fileno()).st_size
        header = read_header(handle, os.fsdecode(path))
    check_holds(header, size - header.offset, os.fsdecode(path))
    return header


def npz_names(path: str | os.PathLike) -> list[str]:
    """The array names of an .npz, from its zip directory alone."""
    with _npz_archive(path) as archive:
        return [_array_name(info.filename) for info in archive.infolist()]


def read_npz(path: str | os.PathLike, limit: int, limit_words: str = "") -> dict[str, np.ndarray]:
    """Every array of an .npz, each member's header checked against the bytes it holds, and their
    total against `limit` (with `limit_words` on how to raise it), before any array is allocated;
    RefusedFileError names the file, the member and the cause."""
    name = os.fsdecode(path)
    with _npz_archive(path) as archive:
        infos = archive.infolist()
        unpacked = sum(info.file_size for info in infos)
        if unpacked > limit:
            raise RefusedFileError(
                name,
                f"its arrays unpack to {size_words(unpacked)}, above the memory limit of {size_words(limit)}"
                + limit_words,
            )
        headers = []
        for info in infos:
            with _member(archive, info, f"{name}:{info.filename}") as (member, where):
                header = read_header(member, where)
            check_holds(header, info.file_size - header.offset, where)
            headers.append(header)
        arrays = {}
        for info, header in zip(infos, headers):
            with _member(archive, info, f"{name}:{info.filename}") as (member, where):
                member.read(header.offset)
                arrays[_array_name(info.filename)] = read_data(member, header, where)
        return arrays


def _array_name(filename: str) -> str:
    return filename.removesuffix(".npy")


@contextlib.contextmanager
def _npz_archive(path: str | os.PathLike) -> Iterator[zipfile.ZipFile]:
    """The zip archive of an .npz, opened within the bounded-read rule; damage is a RefusedFileError."""
    name = os.fsdecode(path)
    with open_regular(path, what=NPZ_FORMAT) as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            raise RefusedFileError(name, "empty (0 bytes); not an .npz")
        try:
            archive = zipfile.ZipFile(handle)
        except zipfile.BadZipFile:
            raise RefusedFileError(name, "not a readable .npz (not a zip archive)") from None
        except (OSError, EOFError, ValueError) as error:
            raise RefusedFileError(name, f"not a readable .npz ({error})") from None
        with archive:
            yield archive


@contextlib.contextmanager
def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, where: str) -> Iterator[tuple[BinaryIO, str]]:
    """One member, opened; a damaged stream or a CRC that does not match is a RefusedFileError."""
    try:
        with archive.open(info) as member:
            yield member, where  # type: ignore[misc]
    except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError, EOFError, zlib.error) as error:
        raise RefusedFileError(where, f"damaged or unreadable ({error})") from None


__all__ = ["ArrayHeader", "check_holds", "npy_header", "npz_names", "read_data", "read_header", "read_npz"]
