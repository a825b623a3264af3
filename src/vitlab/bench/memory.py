"""Peak memory of one step: the most tensor memory alive at once above what was alive before it.

CPU: torch.profiler with profile_memory=True records every allocation and free of PyTorch's CPU
allocator (eager kernels and compiled graphs alike); replaying them in time order gives the peak.
tracemalloc cannot see these allocations and the process's RSS keeps freed pages that malloc did not
return, so neither is used. Memory that libraries allocate behind PyTorch's back (oneDNN's scratch
space) is not counted, for any implementation.
CUDA: the caching allocator's own peak counter.

The profiler's C++ side (Kineto) writes a line to stderr at every start and stop, and an "ERROR" on
a machine without a GPU; KINETO_LOG_LEVEL=6 (above its last level) keeps a bench's output to its own
lines. A level the user set stays.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile


def _allocations(node, out: list[tuple[int, int]]) -> None:
    from torch._C._profiler import _EventType

    if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
        out.append((node.start_time_ns, node.extra_fields.alloc_size))  # negative for a free
    for child in node.children:
        _allocations(child, out)


def cpu_peak_bytes(step: Callable[[], object]) -> int:
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # read when the profiler first starts
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        step()
    events: list[tuple[int, int]] = []
    for root in profiler.profiler.kineto_results.experimental_event_tree():
        _allocations(root, events)
    live = peak = 0
    for _, size in sorted(events, key=lambda event: event[0]):
        live += size
        peak = max(peak, live)
    return peak


def cuda_peak_bytes(step: Callable[[], object], device: torch.device) -> int:
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def step_peak_bytes(step: Callable[[], object], device: torch.device) -> int:
    """Peak bytes allocated during one call of `step`, above the bytes alive when it starts."""
    if device.type == "cuda":
        return cuda_peak_bytes(step, device)
    return cpu_peak_bytes(step)
