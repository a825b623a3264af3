"""Where an experiment's numbers came from: the code's commit, the torch release and the CPU
kernels it dispatched to. Two runs that agree on all three give bit-identical numbers on CPU."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import torch

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


def provenance(threads: int) -> dict[str, str | int]:
    """The commit, torch version and CPU capability (AVX2, AVX512, ...) the numbers depend on."""
    return {
        "commit": git_commit(),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "python": platform.python_version(),
        "threads": threads,
    }
