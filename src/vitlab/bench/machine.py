"""What the machine can do: a description, its GEMM peak, and how busy it was.

The GEMM peak is the best rate of torch.mm on large squares; it is the ceiling that model FLOPs
utilisation (MFU) is measured against on this machine.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from importlib import metadata

import torch

from vitlab.accel.cpu import cpu_capability, cpu_model, cpu_name
from vitlab.accel.kernels import native, onednn_linear

# Variables that make this CPU run as a lesser one: ATen's kernels (ATEN_CPU_CAPABILITY=avx2), oneDNN's
# (ONEDNN_MAX_CPU_ISA=AVX2: bf16 then has no native kernels) and MKL's fp32 GEMMs. Recorded when set.
EMULATION_ENVS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


PEERS = ("timm", "transformers", "torchvision", "onnxruntime", "openvino")  # the packages whose versions a run records


def peer_versions() -> dict[str, str | None]:
    """Installed version of each peer package (None: not installed)."""
    versions: dict[str, str | None] = {}
    for name in PEERS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def emulation() -> dict[str, str]:
    """The variables of EMULATION_ENVS that are set (empty: the CPU as it is)."""
    return {name: os.environ[name] for name in EMULATION_ENVS if os.environ.get(name)}


def cpu_text(machine: dict) -> str:
    """ "AMD EPYC (AuthenticAMD family 25 model 17)": the CPU's name and which one of that name it is."""
    model = machine.get("cpu_model") or "family and model not recorded"
    return f"{machine.get('cpu', 'CPU not recorded')} ({model})"


def capability_text(machine: dict) -> str:
    """ "AVX2 (emulated on ...: ATEN_CPU_CAPABILITY=avx2, ...), bf16 emulated": said beside every table."""
    text = str(machine.get("cpu_capability", "not recorded"))
    if machine.get("emulation"):
        settings = ", ".join(f"{name}={value}" for name, value in machine["emulation"].items())
        text += f" (emulated on a {cpu_text(machine)}: {settings})"
    if "native_bf16" in machine:
        text += ", bf16 " + ("native" if machine["native_bf16"] else "emulated (no native kernels)")
    return text


def describe(device: torch.device) -> dict:
    info = {
        "device": str(device),
        "cpu": cpu_name(),
        "cpu_model": cpu_model(),  # family and model: CPUs of one name differ
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cpu_capability": cpu_capability(),  # AVX2, AVX512, ...: the CPU kernels used
        "native_bf16": native(torch.bfloat16),  # oneDNN's bf16 GEMMs (else emulated)
        "emulation": emulation(),
        "python": platform.python_version(),
        "peers": peer_versions(),
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
    """Best FLOP/s of an n x n by n x n GEMM (2 n^3 FLOPs) over the given sizes: torch.mm's and, on a
    CPU where oneDNN runs `dtype` natively, oneDNN's linear (fp32 torch.mm runs MKL, which fast paths
    may pass over)."""
    gemms: list[Callable[[torch.Tensor, torch.Tensor], object]] = [torch.mm]
    if device.type == "cpu" and torch.backends.mkldnn.is_available() and native(dtype):
        gemms.append(lambda a, b: onednn_linear(a, b, None))
    best = 0.0
    for n in sizes:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        for gemm in gemms:
            gemm(a, b)  # warm-up: thread pool, kernel selection
            synchronize(device)
            for _ in range(repeats):
                start = time.perf_counter()
                gemm(a, b)
                synchronize(device)
                best = max(best, 2 * n**3 / (time.perf_counter() - start))
    return best


def utilisation(
    flops_per_image: float, images_per_s: float, dtype: str, peaks: dict[str, float], other_numerics: bool = False
) -> float | None:
    """Model FLOPs utilisation: model FLOP/s over the fastest GEMM this machine runs on `dtype`'s
    numbers. bf16 / fp16 operands widen to fp32 exactly, so where the CPU emulates them (their own GEMM
    a slow fallback, against which every row would read thousands of percent) that is
    the fp32 GEMM's peak. None for int8 rows (`other_numerics`): their GEMMs are int8, whose peak is
    not measured."""
    if other_numerics:
        return None
    peak = max(peaks[dtype], peaks["fp32"]) if dtype != "fp32" else peaks[dtype]
    return flops_per_image * images_per_s / peak
