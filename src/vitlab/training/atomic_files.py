"""Crash-safe files and folders, with their SHA-256 checksums beside them.

A file is written under a temporary name in the same folder, fsynced and renamed (`atomic_write`); a
folder is filled under a temporary name and renamed the same way (`atomic_folder`). Checksums go
beside what they check, `step-00001200.sha256` for `step-00001200.pt` or the folder `step-00001200`,
in `sha256sum` format, so that `sha256sum -c` checks them too; `verify_checkpoint` checks them here.
A full disk is one CheckpointError and leaves the previous file in place.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from vitlab.weights import CheckpointError

CHECKSUMS = ".sha256"  # step-00001200.sha256 beside step-00001200.pt (or the folder step-00001200)
CHECKSUM_LINE = re.compile(r"([0-9a-f]{64})  (\S(?:.*\S)?)")  # as sha256sum writes it
PARTIAL = ".partial-"  # in the names of files and folders still being written


def atomic_write(
    path: Path, write: Callable[[IO[bytes]], object], before_rename: Callable[[Path], None] | None = None
) -> None:
    """Write `path` through a temporary file in the same folder: fsync, `before_rename(temporary)`,
    rename, fsync the folder."""
    temporary = path.with_name(f".{path.name}{PARTIAL}{os.getpid()}")
    try:
        with open(temporary, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        if before_rename is not None:
            before_rename(temporary)
        os.replace(temporary, path)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        raise _write_error(path, error) from None
    _fsync(path.parent)


@contextlib.contextmanager
def atomic_folder(path: str | Path, commit: bool = True) -> Iterator[Path]:
    """Fill a folder under a temporary name in the same parent, then rename it to `path`.

        with atomic_folder(checkpoint_dir(out) / f"step-{step:08d}", commit=rank == 0) as partial:
            torch.distributed.checkpoint.save(state, checkpoint_id=partial)
        if rank == 0:
            publish(out, checkpoint_dir(out) / f"step-{step:08d}", keep)

    The temporary name depends only on `path`, so every rank of a sharded save writes into the same
    folder; only the rank with `commit` renames it (torch.distributed.checkpoint.save returns on the
    coordinator once every rank's shards are written). A crash before the rename leaves `path` as it
    was; `remove_partial_writes` (called by `save_checkpoint`; before a sharded save, by rank 0 ahead
    of a barrier) clears what a crashed writer left. The committing rank records the checksum of
    every file before the rename.
    """
    path = Path(path)
    partial = path.with_name(f".{path.name}{PARTIAL}folder")
    partial.mkdir(parents=True, exist_ok=True)
    try:
        yield partial
        if not commit:
            return
        for file in partial.rglob("*"):
            if file.is_file():
                _fsync(file)
        _fsync(partial)
        record_checksums(path, partial)
        if path.exists():  # rename cannot replace a non-empty folder: move the old one aside first
            old = path.with_name(f".{path.name}{PARTIAL}old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(partial, path)
            shutil.rmtree(old)
        else:
            os.replace(partial, path)
    except BaseException as error:
        if commit:
            shutil.rmtree(partial, ignore_errors=True)
        raise _write_error(path, error) from None
    _fsync(path.parent)


def _write_error(path: Path, error: BaseException) -> BaseException:
    """A failed write as one clear CheckpointError when the cause is the file system (torch.save
    wraps the OSError of a full disk in a RuntimeError), else the error itself."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return error
    reason = "the disk is full" if cause.errno in (errno.ENOSPC, errno.EDQUOT) else (cause.strerror or str(cause))
    return CheckpointError(f"{path}: cannot write ({reason}); the previous checkpoint is kept")


def _fsync(path: Path) -> None:
    """Flush a file's or a folder's entry to disk (some platforms cannot open folders: then the
    rename is still atomic, only not yet durable)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def remove_partial_writes(folder: Path) -> None:
    """Temporary files and folders that a killed writer left behind."""
    for leftover in folder.glob(f".*{PARTIAL}*"):
        shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink(missing_ok=True)


# -- checksums -------------------------------------------------------------------------------------
def checksum_file(checkpoint: Path) -> Path:
    """step-00001200.sha256 for step-00001200.pt and for the folder step-00001200."""
    return checkpoint.with_name(checkpoint.name.removesuffix(".pt") + CHECKSUMS)


def _sha256(path: Path) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _files_of(path: Path) -> list[Path]:
    """The files of a checkpoint: itself, or every file in its folder (sorted)."""
    return sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]


def record_checksums(checkpoint: Path, written: Path | None = None) -> None:
    """Write checksum_file(checkpoint): the SHA-256 of each file of `written` (the checkpoint still
    under its temporary name; default: the checkpoint itself), named as they are under `checkpoint`,
    so that `sha256sum -c step-00001200.sha256` in the checkpoints folder checks them."""
    written = Path(written or checkpoint)
    lines = []
    for file in _files_of(written):
        name = Path(checkpoint.name, file.relative_to(written)) if written.is_dir() else checkpoint.name
        lines.append(f"{_sha256(file)}  {name}\n")
    atomic_write(checksum_file(checkpoint), lambda file: file.write("".join(lines).encode()))


def verify_checkpoint(checkpoint: str | Path) -> None:
    """CheckpointError (one line, naming the file) unless every file of `checkpoint` is there and has
    the SHA-256 recorded when it was written, and nothing else is in its folder."""
    checkpoint = Path(checkpoint)
    record = checksum_file(checkpoint)
    if not record.is_file():
        listed = f"$(find {checkpoint.name} -type f)" if checkpoint.is_dir() else checkpoint.name
        raise CheckpointError(
            f"{checkpoint}: no checksum file {record.name} beside it, so it cannot be checked "
            f"(to trust it as it is: cd {checkpoint.parent} && sha256sum {listed} > {record.name})"
        )
    expected: dict[str, str] = {}
    for number, line in enumerate(record.read_text(errors="replace").splitlines(), 1):
        match = CHECKSUM_LINE.fullmatch(line)
        if match is None:
            raise CheckpointError(f"{record}: line {number} is not '<sha256>  <file>'")
        expected[match.group(2)] = match.group(1)
    files = _files_of(checkpoint) if checkpoint.exists() else []
    present = {str(file.relative_to(checkpoint.parent)): file for file in files}
    for name in sorted(expected.keys() - present.keys()):
        raise CheckpointError(f"{checkpoint.parent / name}: missing (it is listed in {record.name})")
    for name in sorted(present.keys() - expected.keys()):
        raise CheckpointError(f"{present[name]}: not listed in {record.name}, so not written with this checkpoint")
    for name, file in present.items():
        actual = _sha256(file)
        if actual != expected[name]:
            raise CheckpointError(
                f"{file}: SHA-256 {actual[:16]}... differs from the {expected[name][:16]}... "
                f"recorded in {record.name}; the file changed after it was written"
            )
