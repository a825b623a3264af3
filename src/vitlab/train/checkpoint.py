"""Training checkpoints in DIR/checkpoints/: everything needed to continue a run exactly.

A checkpoint (`step-00001200.pt`, read with torch.load(weights_only=True), so it never runs code)
holds the model, optimiser, scheduler, EMA and gradient-scaler states, the step and epoch, the
position in the epoch's data order, the running training-loss sums, every random generator of the
main process (python, numpy, torch, CUDA) and the resolved run config. Data-loader workers need no
saved state: each sample's augmentation is seeded by (seed, epoch, index) (see loader.py).

Writes are atomic: the file is written under a temporary name in the same folder, fsynced and
renamed, and only then does the `latest` pointer (a one-line text file, written the same way) name
it. A crash at any moment leaves `latest` naming a complete checkpoint.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from vitlab.weights import CheckpointError

log = logging.getLogger("vitlab")

FOLDER = "checkpoints"
LATEST = "latest"
FORMAT = "vitlab-train-state"
FORMAT_VERSION = 1
NAME = re.compile(r"step-(\d+)\.pt")


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


# -- atomic files ----------------------------------------------------------------------------------
def atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write `path` through a temporary file in the same folder: fsync, rename, fsync the folder."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(temporary, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, OSError):
            reason = "the disk is full" if error.errno == errno.ENOSPC else (error.strerror or str(error))
            raise CheckpointError(f"{path}: cannot write ({reason}); the previous checkpoint is kept") from None
        raise
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open folders; the rename is still atomic
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


# -- writing and reading ---------------------------------------------------------------------------
def save_checkpoint(out: str | Path, step: int, state: dict[str, Any], keep: int) -> Path:
    """Write `state` as the checkpoint of `step`, point `latest` at it, keep the newest `keep`."""
    folder = checkpoint_dir(out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / checkpoint_name(step)
    document = {"format": FORMAT, "format_version": FORMAT_VERSION, **state}
    atomic_write(path, lambda file: torch.save(document, file))
    atomic_write(folder / LATEST, lambda file: file.write(f"{path.name}\n".encode()))
    for old in list_checkpoints(out)[:-keep]:
        if old != path:
            old.unlink(missing_ok=True)
    return path


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
    if not NAME.fullmatch(name) or not path.is_file():
        raise CheckpointError(f"{pointer}: names {name!r}, which is not a checkpoint in {pointer.parent}")
    return path


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a training checkpoint without executing anything stored in it."""
    path = Path(path)
    try:
        document = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist") from None
    except Exception as error:  # truncated file, foreign pickle, code in the pickle
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"{path}: not a readable training checkpoint ({reason})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a vitlab training checkpoint")
    if document.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: training checkpoint version {document.get('format_version')!r}; "
                              f"this vitlab reads version {FORMAT_VERSION}")
    return document
