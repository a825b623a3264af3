"""Reading tensors from state-dict files without ever running pickled code."""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from vitlab.errors import CheckpointError

PICKLE_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt", ".pth.tar")  # .pth.tar: timm train.py's checkpoints
SAFETENSORS_SUFFIX = ".safetensors"
WRAPPER_KEYS = ("state_dict", "model", "module")  # training checkpoints nest the weights
# What a timm train.py checkpoint records beside the weights: the model name and its command line
# (an argparse.Namespace, the one class besides tensors and plain containers its unpickling builds).
RECORD_KEYS = ("arch", "args")


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """Tensors of a .safetensors file, or of a pickle loaded with weights_only=True."""
    return read_checkpoint(path)[0]


def read_checkpoint(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The tensors of a checkpoint file and what a training checkpoint records beside them
    ({"arch": ..., "args": {...}} of timm's train.py; empty for a plain state dict)."""
    path = Path(path)
    if path.suffix == SAFETENSORS_SUFFIX:
        try:
            return load_file(str(path)), {}
        except (SafetensorError, OSError) as error:
            raise CheckpointError(f"{path}: not a readable safetensors file ({error})") from None
    if not path.name.endswith(PICKLE_SUFFIXES):
        raise CheckpointError(
            f"{path}: unknown checkpoint format (expected .npz, {SAFETENSORS_SUFFIX}, "
            f"{', '.join(PICKLE_SUFFIXES)} or a folder)"
        )
    loaded = load_pickle(path)
    return unwrap(loaded, path), training_record(loaded)


def training_record(loaded: Any) -> dict[str, Any]:
    if not isinstance(loaded, dict):
        return {}
    record = {key: loaded[key] for key in RECORD_KEYS if key in loaded}
    if isinstance(record.get("args"), argparse.Namespace):
        record["args"] = vars(record["args"])
    return record


def read_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor in a .safetensors file, from its header alone: no tensor is read,
    so a file can be checked against the model before anything is allocated."""
    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as handle:
            return {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
    except (SafetensorError, OSError) as error:
        raise CheckpointError(f"{path}: not a readable safetensors file ({error})") from None


def load_pickle(path: str | Path) -> Any:
    """torch.load with weights_only=True: the unpickler builds tensors and plain containers only and
    never calls code; a file that asks for more, or is cut short, is one CheckpointError."""
    path = Path(path)
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):  # it only holds attributes
            return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist") from None
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"{path}: refused to unpickle: the file holds more than plain tensors ({_unpickler_reason(error)})"
        ) from None
    except (RuntimeError, EOFError, OSError) as error:
        reason = str(error).strip().split(". ")[0] or type(error).__name__
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint ({reason})") from None


def _unpickler_reason(error: pickle.UnpicklingError) -> str:
    """The line of torch's long message that names what was refused, e.g. "Unsupported global: GLOBAL io.open"."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    named = [line.split("error: ", 1)[1] for line in lines if "WeightsUnpickler error: " in line]
    reason = named[0].split(" was not an allowed global")[0] if named else (lines[0] if lines else "")
    return reason or type(error).__name__


def unwrap(loaded: Any, path: Path) -> dict[str, torch.Tensor]:
    """Find the flat {name: tensor} dict inside a training checkpoint; drop DDP's "module." prefix."""
    while isinstance(loaded, dict):
        wrapper = next((key for key in WRAPPER_KEYS if isinstance(loaded.get(key), dict)), None)
        if wrapper is None:
            break
        loaded = loaded[wrapper]
    if not isinstance(loaded, dict) or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise CheckpointError(f"{path}: holds no flat {{name: tensor}} state dict")
    if loaded and all(key.startswith("module.") for key in loaded):
        loaded = {key[len("module.") :]: value for key, value in loaded.items()}
    return loaded
