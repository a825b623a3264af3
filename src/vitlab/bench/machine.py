"""What the machine can do: a description, its GEMM peak, and how busy it was.

The GEMM peak is the best rate of torch.mm on large squares; it is the ceiling that model FLOPs
utilisation (MFU) is measured against on this machine.
"""

from __future__ import annotations

import os
import platform
import time

import torch


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def describe(device: torch.device) -> dict:
    info = {
        "device": str(device),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # AVX2, AVX512, ...: the CPU kernels used
        "python": platform.python_version(),
        "load_average": load_average(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gemm_peak(
    dtype: torch.dtype, device: torch.device, sizes: tuple[int, ...] = (1024, 2048), repeats: int = 3
) -> float:
    """Best FLOP/s of an n x n by n x n torch.mm (2 n^3 FLOPs) over the given sizes."""
    best = 0.0
    for n in sizes:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        torch.mm(a, b)  # warm-up: thread pool, kernel selection
        synchronize(device)
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            synchronize(device)
            best = max(best, 2 * n**3 / (time.perf_counter() - start))
    return best
