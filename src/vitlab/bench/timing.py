"""Interleaved timing: every contender runs once per round, in a rotating order.

On a shared or thermally throttled machine the speed drifts over a run; interleaving spreads that
drift over all contenders alike, and the median over rounds ignores the odd stall.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from .machine import synchronize


def time_once(step: Callable[[], object], device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    step()
    synchronize(device)
    return time.perf_counter() - start


def interleaved(steps: dict[str, Callable[[], object]], rounds: int, device: torch.device) -> dict[str, list[float]]:
    """Seconds per call of each step, `rounds` times each; round r starts at contender r mod n."""
    names = list(steps)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            seconds[name].append(time_once(steps[name], device))
    return seconds
