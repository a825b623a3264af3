"""Every random generator the training touches: seeding, saving and restoring, and seeds from seeds.

A run is seeded once (`seed_everything`); a checkpoint saves the main process's generators
(`capture_rng`) and a resumed run puts them back (`restore_rng`). Each sample's augmentation is drawn
under its own seed, `hash_seeds(seed, epoch, index)`, inside `preserved_rng` (see loader.py).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def reseed(seed: int) -> None:
    """Seed the generators a transform may draw from. Only the CPU generator: torch.manual_seed
    would also seed every GPU's and costs ~70 us, more than decoding a small image."""
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
    """The state of every random generator of this process, as plain values and tensors."""
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
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(_as_tuple(state["python"]))
    numpy = state["numpy"]
    np.random.set_state(
        ("MT19937", numpy["keys"].numpy().astype(np.uint32), numpy["pos"], numpy["has_gauss"], numpy["cached_gaussian"])
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuple(value: Any) -> Any:
    """random.setstate wants the nested tuples getstate gave (a round trip may turn them into lists)."""
    return tuple(_as_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value
