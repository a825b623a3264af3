"""Every random generator the training touches: seeding, saving and restoring, and seeds from seeds.

A run is seeded once (`seed_everything`); under torchrun process r then draws its dropout, stochastic
depth and Mixup from run.seed + r (`process_seed`, timm's rule; process 0, like a single process, goes on
from run.seed). A checkpoint saves every process's generators (`capture_rng`: the CPU ones and those of
the process's own GPU) and a resumed run puts them back (`restore_rng`). Each sample's augmentation is
drawn under its own seed, `hash_seeds(seed, epoch, index)`, inside `preserved_rng` (see loader.py).
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

log = logging.getLogger("vitlab")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def process_seed(seed: int, rank: int) -> int:
    """The seed of process `rank`'s own draws (timm's seed + rank)."""
    return seed + rank


def reseed(seed: int) -> None:
    """Seed the generators a transform may draw from. Only the CPU generator: torch.manual_seed
    would also seed every GPU's and costs more than decoding a small image."""
    torch.default_generator.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def hash_seeds(*numbers: int) -> int:
    """A 63-bit seed from a few integers (splitmix64-style), so nearby inputs give unrelated seeds."""
    value = 0x9E3779B97F4A7C15
    for number in numbers:
        value = (value ^ (number & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        value ^= value >> 31
    return value & 0x7FFFFFFFFFFFFFFF


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """The caller's torch (CPU), Python and NumPy generator states are back as they were on exit."""
    torch_state, python_state, numpy_state = torch.get_rng_state(), random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        torch.set_rng_state(torch_state)
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def capture_rng() -> dict[str, Any]:
    """The state of every random generator of this process, as plain values and tensors: of the GPUs,
    the one the process draws on (each process of a run has its own)."""
    numpy_state = np.random.get_state(legacy=True)  # the default; the stubs type a bare call as the dict form
    assert isinstance(numpy_state, tuple)
    keys, position, has_gauss, cached = numpy_state[1:]
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda_device"] = torch.cuda.get_rng_state(torch.cuda.current_device())
    return state


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(_as_tuple(state["python"]))
    numpy = state["numpy"]
    np.random.set_state(
        ("MT19937", numpy["keys"].numpy().astype(np.uint32), numpy["pos"], numpy["has_gauss"], numpy["cached_gaussian"])
    )
    torch.set_rng_state(state["torch"])
    if not torch.cuda.is_available():
        return
    device = torch.cuda.current_device()
    if "cuda_device" in state:
        torch.cuda.set_rng_state(state["cuda_device"], device)
    elif "cuda" in state:  # an older checkpoint: every visible GPU's, by index
        states = state["cuda"]
        if device < len(states):
            torch.cuda.set_rng_state(states[device], device)
        else:
            log.warning(
                "the checkpoint holds the generators of %d GPU(s), not of cuda:%d; it draws afresh",
                len(states),
                device,
            )


def restore_process_rng(state: Mapping[str, Any], rank: int, seed: int) -> None:
    """Process `rank`'s generators from a checkpoint's state: process 0's are `rng`, the others'
    `process_rng`. A checkpoint written by fewer processes (or before every process's were kept) has
    none for it: it draws from process_seed(seed, rank) and the checkpoint's step from here on."""
    others = state.get("process_rng") or []
    if rank == 0 or rank <= len(others):
        restore_rng(state["rng"] if rank == 0 else others[rank - 1])
        return
    seed_everything(hash_seeds(process_seed(seed, rank), state["step"]))
    log.warning("process %d: the checkpoint holds no generators of it; it draws afresh from here", rank)


def _as_tuple(value: Any) -> Any:
    """random.setstate wants the nested tuples getstate gave (a round trip may turn them into lists)."""
    return tuple(_as_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value
