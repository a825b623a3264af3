"""Training checkpoints in DIR/checkpoints/: everything needed to continue a run exactly.

A checkpoint (`step-00001200.pt`, read with torch.load(weights_only=True), so it never runs code)
holds the model, optimiser, scheduler, EMA and gradient-scaler states, the step and epoch, the
position in the epoch's data order, the running training-loss sums, every random generator of the
main process (python, numpy, torch, CUDA) and the resolved run config. Data-loader workers need no
saved state: each sample's augmentation is seeded by (seed, epoch, index) (see loader.py).

Writes are atomic: the file is written under a temporary name in the same folder, fsynced, its
SHA-256 recorded beside it (`step-00001200.sha256`, in `sha256sum` format, written the same way),
renamed, and only then does the `latest` pointer (a one-line text file) name it. A crash at any
moment leaves `latest` naming a complete checkpoint; a full disk raises CheckpointError and leaves
the previous one in place. A sharded checkpoint (a folder, e.g. from torch.distributed.checkpoint)
is written the same way with `atomic_folder`, every file of it checksummed, and then `publish`ed.

A resumed run takes `newest_valid_checkpoint`: the one `latest` names if its checksums hold, else
the newest one whose checksums hold, saying in the log which were passed over and why; a run whose
`latest` pointer was deleted finds its newest checkpoint the same way.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import logging
import os
import random
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from vitlab.weights import CheckpointError
from vitlab.weights.files import load_pickle

log = logging.getLogger("vitlab")

FOLDER = "checkpoints"
LATEST = "latest"
FORMAT = "vitlab-train-state"
FORMAT_VERSION = 1
NAME = re.compile(r"step-(\d+)(?:\.pt)?")  # a file, or the folder of a sharded checkpoint
CHECKSUMS = ".sha256"  # step-00001200.sha256 beside step-00001200.pt (or the folder step-00001200)
CHECKSUM_LINE = re.compile(r"([0-9a-f]{64})  (\S(?:.*\S)?)")  # as sha256sum writes it
PARTIAL = ".partial-"  # in the names of files and folders still being written
SHARDED_STATE = "trainer.pt"  # in a sharded checkpoint's folder: everything but the model and optimiser shards
# Fault-injection tests set this to a step number: the writer of that step's checkpoint stops half-way
# and waits (PAUSE_SECONDS) so that the test can kill it mid-write.
PAUSE_ENV = "VITLAB_TEST_PAUSE_CHECKPOINT"
PAUSE_SECONDS = 600


def checkpoint_dir(out: str | Path) -> Path:
    return Path(out) / FOLDER


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}.pt"


# -- random generators -----------------------------------------------------------------------------
def capture_rng() -> dict[str, Any]:
    """The state of every random generator of this process, as plain values and tensors."""
    keys, position, has_gauss, cached = np.random.get_state()[1:]
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(position),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(_as_tuple(state["python"]))
    numpy = state["numpy"]
    np.random.set_state(("MT19937", numpy["keys"].numpy().astype(np.uint32), numpy["pos"],
                         numpy["has_gauss"], numpy["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuple(value: Any) -> Any:
    """random.setstate wants the nested tuples getstate gave (a round trip may turn them into lists)."""
    return tuple(_as_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value


# -- atomic files and folders ----------------------------------------------------------------------
def atomic_write(path: Path, write: Callable[[IO[bytes]], None],
                 before_rename: Callable[[Path], None] | None = None) -> None:
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


# -- writing and reading ---------------------------------------------------------------------------
def save_checkpoint(out: str | Path, step: int, state: dict[str, Any], keep: int) -> Path:
    """Write `state` as the checkpoint of `step`, point `latest` at it, keep the newest `keep`."""
    folder = checkpoint_dir(out)
    folder.mkdir(parents=True, exist_ok=True)
    remove_partial_writes(folder)
    path = folder / checkpoint_name(step)
    document = {"format": FORMAT, "format_version": FORMAT_VERSION, **state}
    atomic_write(path, lambda file: _save_document(document, file, step),
                 before_rename=lambda temporary: record_checksums(path, temporary))
    publish(out, path, keep)
    return path


def publish(out: str | Path, path: Path, keep: int) -> None:
    """Point `latest` at the complete checkpoint `path` (a file, or a sharded checkpoint's folder),
    then delete all but the newest `keep` checkpoints."""
    folder = checkpoint_dir(out)
    atomic_write(folder / LATEST, lambda file: file.write(f"{path.name}\n".encode()))
    for old in list_checkpoints(out)[:-keep]:
        if old != path:
            shutil.rmtree(old) if old.is_dir() else old.unlink(missing_ok=True)
            checksum_file(old).unlink(missing_ok=True)
    kept = {checksum_file(p) for p in list_checkpoints(out)}
    for orphan in folder.glob(f"step-*{CHECKSUMS}"):  # of a checkpoint a crash kept from its rename
        if orphan not in kept:
            orphan.unlink(missing_ok=True)


def _save_document(document: dict[str, Any], file: IO[bytes], step: int) -> None:
    if os.environ.get(PAUSE_ENV) == str(step):
        _pause_mid_write(document, file)
    torch.save(document, file)


def _pause_mid_write(document: dict[str, Any], file: IO[bytes]) -> None:
    """Fault-injection hook: write half the checkpoint, say so on stderr, and wait to be killed."""
    buffer = io.BytesIO()
    torch.save(document, buffer)
    data = buffer.getvalue()
    file.write(data[: len(data) // 2])
    file.flush()
    os.fsync(file.fileno())
    print(f"{PAUSE_ENV}: paused writing {file.name} after {len(data) // 2} of {len(data)} bytes",
          file=sys.stderr, flush=True)
    time.sleep(PAUSE_SECONDS)
    file.seek(0)
    file.truncate()


def list_checkpoints(out: str | Path) -> list[Path]:
    """Complete checkpoints in DIR/checkpoints/, oldest first."""
    folder = checkpoint_dir(out)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := NAME.fullmatch(p.name))]
    return [path for _, path in sorted(found)]


def latest_checkpoint(out: str | Path) -> Path | None:
    """The checkpoint `latest` names, or None when the run has none."""
    pointer = checkpoint_dir(out) / LATEST
    if not pointer.is_file():
        return None
    name = pointer.read_text().strip()
    path = pointer.parent / name
    if not NAME.fullmatch(name) or not path.exists():
        raise CheckpointError(f"{pointer}: names {name!r}, which is not a checkpoint in {pointer.parent}")
    return path


def holds_checkpoints(out: str | Path) -> bool:
    """Whether a run has written checkpoints to `out` (a `latest` pointer, or any checkpoint)."""
    return (checkpoint_dir(out) / LATEST).is_file() or bool(list_checkpoints(out))


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
        files = f"$(find {checkpoint.name} -type f)" if checkpoint.is_dir() else checkpoint.name
        raise CheckpointError(f"{checkpoint}: no checksum file {record.name} beside it, so it cannot be checked "
                              f"(to trust it as it is: cd {checkpoint.parent} && sha256sum {files} > {record.name})")
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
            raise CheckpointError(f"{file}: SHA-256 {actual[:16]}... differs from the {expected[name][:16]}... "
                                  f"recorded in {record.name}; the file changed after it was written")


def newest_valid_checkpoint(out: str | Path) -> Path | None:
    """The checkpoint a resumed run continues from: the one `latest` names when its checksums hold,
    else the newest one whose checksums hold (the log says which were passed over, and why). None
    when `out` holds no checkpoint; CheckpointError when it holds some and none is intact."""
    folder = checkpoint_dir(out)
    try:
        named = latest_checkpoint(out)
    except CheckpointError as error:
        log.warning("%s; looking for the newest intact checkpoint instead", error)
        named = None
    found = list_checkpoints(out)[::-1]  # newest first
    if named is None and found and not (folder / LATEST).is_file():
        log.warning("%s: no %r pointer; looking for the newest intact checkpoint", folder, LATEST)
    candidates = ([named] if named is not None else []) + [path for path in found if path != named]
    problems = []
    for path in candidates:  # each checkpoint once: bounded by how many there are
        try:
            verify_checkpoint(path)
        except CheckpointError as error:
            problems.append(str(error))
            log.warning("passing over checkpoint %s: %s", path.name, error)
            continue
        if problems or path != named:
            log.warning("resuming from %s, the newest intact checkpoint", path)
        return path
    if not candidates:
        return None
    raise CheckpointError(f"{folder}: none of its {len(candidates)} checkpoint(s) is intact "
                          f"(run.keep_ckpts keeps more); {'; '.join(problems)}")


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a training checkpoint without executing anything stored in it (of a sharded checkpoint,
    the state besides the shards, which distributed.load_sharded reads into the model)."""
    path = Path(path)
    if path.is_dir():
        path = path / SHARDED_STATE
    document = load_pickle(path)  # truncated files and pickles with code: CheckpointError, nothing run
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a vitlab training checkpoint")
    if document.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: training checkpoint version {document.get('format_version')!r}; "
                              f"this vitlab reads version {FORMAT_VERSION}")
    return document
