"""Where an experiment's numbers came from: the code's commit, the torch release, the CPU (vendor,
family and model) and the kernels it dispatched to. Only two runs that agree on all of them may be
expected to give bit-identical numbers: CPUs of one capability (AVX512 on an AMD EPYC and on an Intel
Xeon) still pick different GEMM kernels in oneDNN and MKL, and their roundings drift apart over
a few hundred training steps."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import torch

from vitlab.accel.cpu import cpu_model, cpu_name

UNKNOWN = "unknown"


def git_commit(directory: Path | None = None) -> str:
    """Short hash of the checkout holding this code, with "-dirty" when the package's own tracked files
    differ from it (documents beside it may change); "unknown" outside git (a wheel, an exported tree)."""
    where = directory or Path(__file__).resolve().parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=where, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".")  # "." is this package
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    return f"{commit}-dirty" if dirty else commit


# What must match, field by field, for a recorded number to be reproduced bit for bit.
SAME_MACHINE_FIELDS = ("torch", "cpu_model", "cpu_capability", "threads")


def provenance(threads: int) -> dict[str, str | int]:
    """The commit, torch version, CPU (name; vendor, family and model) and CPU capability (AVX2, AVX512,
    ...) the numbers depend on."""
    return {
        "commit": git_commit(),
        "torch": torch.__version__,
        "cpu": cpu_name(),
        "cpu_model": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "python": platform.python_version(),
        "threads": threads,
    }


def reproduces_bitwise(recorded: dict, current: dict) -> bool:
    """Whether a number recorded on `recorded`'s machine can be expected bit for bit on `current`'s: only
    on an exact match of torch, CPU vendor/family/model, capability and threads. A record that does not
    name its CPU (written before it was recorded) never matches."""
    return all(
        recorded.get(field) is not None and recorded.get(field) == current.get(field) for field in SAME_MACHINE_FIELDS
    )
