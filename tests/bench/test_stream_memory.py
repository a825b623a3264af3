"""`vitlab predict` keeps its memory bounded: the peak RSS of the command and its DataLoader worker
over 2,500 files stays within 10% of the peak over 250 (keeping the 2,500 decoded 128 x 128 images,
as a predictor that reads everything first does, adds about 15%)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from vitlab.bench.rss import _proc_rss as process_rss
from vitlab.bench.rss import tree_rss
from vitlab.bench.stream_memory import measure


@pytest.mark.integration
def test_tree_rss_counts_a_process_and_its_children():
    child = subprocess.Popen([sys.executable, "-c", "import time; x = bytearray(200 * 2**20); time.sleep(60)"])
    try:
        deadline = time.monotonic() + 30
        while tree_rss(child.pid) < 190 * 2**20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tree_rss(child.pid) >= 190 * 2**20
        assert tree_rss(os.getpid()) - process_rss(os.getpid()) >= 190 * 2**20  # this process's child counted
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_peak_memory_does_not_grow_with_the_number_of_files(tmp_path):
    result = measure((250, 2500), tmp_path, image=128, workers=1)
    assert result["runs"][2500]["rows"] == 2500
    assert result["runs"][250]["peak_rss_mib"] > 100  # the sampler saw the processes
    assert result["growth"] < 1.10, result
