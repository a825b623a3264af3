"""`import vitlab`, `vitlab --help` and a mistyped command load only what they use: neither torch nor
the libraries the commands run (sklearn, matplotlib, scipy, torchvision, httpx), and take little
CPU time (`python -X importtime` names every module a process imports)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from helpers import REPO_ROOT

HEAVY = ("torch", "sklearn", "matplotlib", "scipy", "torchvision", "httpx")
CPU_SECONDS = 1.5


def imported(argv: list[str]) -> tuple[set[str], float, subprocess.CompletedProcess]:
    """The top-level packages a Python process running `argv` imports, the CPU seconds it took
    (user and system), and the process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, env=env, timeout=300
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    names = {
        line.rsplit("|", 1)[-1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return names, cpu, done


@pytest.mark.integration
@pytest.mark.parametrize(
    "argv, status",
    [(["-c", "import vitlab"], 0), (["-m", "vitlab", "--help"], 0), (["-m", "vitlab", "trian", "--data", "x"], 2)],
    ids=["import", "help", "typo"],
)
def test_loads_no_heavy_library(argv, status):
    names, cpu, done = imported(argv)
    assert done.returncode == status, done.stderr[-2000:]
    assert "vitlab" in names
    assert not names & set(HEAVY), sorted(names & set(HEAVY))
    assert cpu < CPU_SECONDS, f"{cpu:.2f} s of CPU"


@pytest.mark.integration
def test_a_name_of_vitlab_imports_what_it_needs_when_used():
    names, _, done = imported(["-c", "import vitlab; print(vitlab.ViTConfig().dim, callable(vitlab.train))"])
    assert done.returncode == 0 and done.stdout.split() == ["768", "True"], done.stderr[-2000:]
    assert "torch" in names
