"""Peak resident memory of a process and all its children (DataLoader workers included), sampled
while it runs: psutil where installed, else Linux's /proc.

The sum of the processes' RSS counts pages that forked workers share with their parent once per
process, as `ps` and `top` would show them; two runs compared this way count alike.
"""

from __future__ import annotations

import importlib
import os
import threading
from pathlib import Path
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _proc_children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def _proc_rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0  # it ended between listing and reading


def tree_rss(pid: int) -> int:
    """Bytes resident in `pid` and its descendants now (0 once it has ended)."""
    try:
        psutil: Any = importlib.import_module("psutil")
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            root = psutil.Process(pid)
            processes = [root, *root.children(recursive=True)]
        except psutil.Error:
            return 0
        total = 0
        for process in processes:
            try:
                total += process.memory_info().rss
            except psutil.Error:
                pass
        return total
    pids, index = [pid], 0
    while index < len(pids):
        pids += _proc_children(pids[index])
        index += 1
    return sum(_proc_rss(p) for p in pids)


class PeakRss:
    """`with PeakRss(pid) as peak: ...` samples the tree every `interval` s; `peak.bytes` is the most seen."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid, self.interval = pid, interval
        self.bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            self.bytes = max(self.bytes, tree_rss(self.pid))
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def reset(self) -> None:
        self.bytes = 0
