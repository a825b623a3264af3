"""Interleaved timing: every contender runs once per round, in a rotating order.

On a shared or thermally throttled machine the speed drifts over a run; interleaving spreads that
drift over all contenders alike, and the median over rounds ignores the odd stall.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping

import torch

from .machine import synchronize


def time_once(step: Callable[[], object], device: torch.device) -> float:
    synchronize(device)
    start = time.perf_counter()
    step()
    synchronize(device)
    return time.perf_counter() - start


def interleaved(
    steps: dict[str, Callable[[], object]], rounds: int, device: torch.device, settle_s: float = 0.0
) -> dict[str, list[float]]:
    """Seconds per call of each step, `rounds` times each; round r starts at contender r mod n. Each
    call is preceded by an untimed pause of `settle_s`: two runtimes' thread pools (OpenMP's, onnxruntime's,
    OpenVINO's) keep spinning for a while after a call, and would take cores from the next one timed."""
    names = list(steps)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            time.sleep(settle_s)
            seconds[name].append(time_once(steps[name], device))
    return seconds


def repeated(step: Callable[[], object], calls: int) -> Callable[[], object]:
    """`step` called `calls` times in a row: one timed sample."""

    def run() -> None:
        for _ in range(calls):
            step()

    return run


def each_call(step: Callable[[], object], calls: int, device: torch.device, into: list[float]) -> Callable[[], object]:
    """`step` called `calls` times in a row, as `repeated`, with each call's seconds appended to `into`:
    a latency's percentiles are over single calls, not over samples' means."""

    def run() -> None:
        for _ in range(calls):
            into.append(time_once(step, device))

    return run


def latency_ms(seconds: list[float]) -> dict[str, float] | None:
    """The median and 90th percentile of single calls' `seconds`, in ms; None for no calls."""
    if not seconds:
        return None
    ms = sorted(1e3 * value for value in seconds)
    p90 = statistics.quantiles(ms, n=10, method="inclusive")[-1] if len(ms) > 1 else ms[0]
    return {"median": round(statistics.median(ms), 4), "p90": round(p90, 4)}


def calls_per_sample(warm: list[float], min_sample_s: float) -> int:
    """Steps per timed sample so that one sample lasts at least `min_sample_s`, from the warm-up
    times: the slowest call after the first (which may compile), since on a shared machine too few
    calls per sample do less harm than too many."""
    return max(1, math.ceil(min_sample_s / max(warm[1:] or warm)))


def median_seconds(
    steps: Mapping[str, Callable[[], object]], device: torch.device, rounds: int, warmup: int, min_sample_s: float
) -> dict[str, float]:
    """The bench's measure of each step: `warmup` calls each, then `rounds` interleaved rounds of
    samples of calls_per_sample calls; the median seconds per call."""
    calls = {
        name: calls_per_sample([time_once(step, device) for _ in range(warmup)], min_sample_s)
        for name, step in steps.items()
    }
    seconds = interleaved({name: repeated(step, calls[name]) for name, step in steps.items()}, rounds, device)
    return {name: statistics.median(values) / calls[name] for name, values in seconds.items()}
