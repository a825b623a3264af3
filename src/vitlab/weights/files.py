"""Reading tensors from state-dict files without ever running pickled code."""

from __future__ import annotations

import argparse
import pickle
import pickletools
import re
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from vitlab.bounded_read import read_bounded
from vitlab.errors import CheckpointError, RefusedFileError

PICKLE_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt", ".pth.tar")  # .pth.tar: timm train.py's checkpoints
SAFETENSORS_SUFFIX = ".safetensors"
WRAPPER_KEYS = ("state_dict", "model", "module")  # training checkpoints nest the weights
# What a timm train.py checkpoint records beside the weights: the model name and its command line
# (an argparse.Namespace, the one class besides tensors and plain containers its unpickling builds).
RECORD_KEYS = ("arch", "args")
MAX_PLAIN_PICKLE_BYTES = 2**30  # scanned for the globals it names when torch refuses it
# What the safe unpickler builds (tensors, containers, a timm checkpoint's Namespace): never named as refused.
SAFE_GLOBALS = ("torch.", "collections.OrderedDict", "_codecs.encode", "argparse.Namespace")
# Lines of torch's refusal that advise loading with weights_only=False, which would run the payload.
ADVICE = re.compile(r"weights_only|Re-running|file an issue|Check the documentation")


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
        named = refused_globals(path)
        reason = (
            f"it names {', '.join(named)}, which could run code"
            if named
            else f"it holds what torch's safe unpickler does not read ({_unpickler_reason(error)})"
        )
        raise CheckpointError(f"{path}: refused to unpickle: {reason}; vitlab loads plain tensors only") from None
    except (RuntimeError, EOFError, OSError) as error:
        reason = str(error).strip().split(". ")[0] or type(error).__name__
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint ({reason})") from None


def refused_globals(path: Path) -> list[str]:
    """The globals (module.name) a pickle names that the safe unpickler refuses, read from its opcodes
    without running any: torch's own reading for a torch.save file, a scan for a plain pickle."""
    try:
        named = set(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception:  # not a torch.save zip archive
        try:
            named = _named_globals(read_bounded(path, MAX_PLAIN_PICKLE_BYTES, "a pickle"))
        except (RefusedFileError, OSError, ValueError, pickle.PickleError):
            return []
    return sorted(name for name in named if not name.startswith(SAFE_GLOBALS))


def _named_globals(data: bytes) -> set[str]:
    """module.name of every GLOBAL and STACK_GLOBAL opcode (the latter's names are the strings it pops)."""
    named: set[str] = set()
    strings: list[str] = []
    memo: dict[Any, str] = {}
    for opcode, argument, _ in pickletools.genops(data):
        if opcode.name == "GLOBAL":
            named.add(str(argument).replace(" ", ".", 1))
        elif isinstance(argument, str) and "UNICODE" in opcode.name:
            strings.append(argument)
        elif opcode.name in ("MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT") and strings:
            memo[len(memo) if opcode.name == "MEMOIZE" else argument] = strings[-1]
        elif opcode.name in ("GET", "BINGET", "LONG_BINGET") and argument in memo:
            strings.append(memo[argument])
        elif opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
            named.add(f"{strings[-2]}.{strings[-1]}")
    return named


def _unpickler_reason(error: pickle.UnpicklingError) -> str:
    """What torch's long message says was refused, without its advice to load with weights_only=False
    (which would run the payload), e.g. "Unsupported operand 149"."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    kept = [line.split("error: ", 1)[-1].strip() for line in lines if not ADVICE.search(line)]
    return next((line for line in kept if line), type(error).__name__)


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
