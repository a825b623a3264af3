"""What a tree of processes is doing, read from Linux's /proc: its children, the addresses it listens on."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

HAS_PROC = Path("/proc/self/task").is_dir() and Path("/proc/net/tcp").is_file()


def children(pid: int) -> list[int]:
    """Direct children of `pid`, oldest (lowest id) first; none once it has exited."""
    try:
        return sorted(int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
    except (FileNotFoundError, ProcessLookupError):
        return []


def tree(pids: list[int]) -> list[int]:
    found, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children(pid)
    return found


def _address(hex_address: str) -> str:
    """/proc/net/tcp{,6} "0100007F:1F90" -> "127.0.0.1" (each 32-bit word is in host byte order)."""
    host = bytes.fromhex(hex_address.split(":")[0])
    words = b"".join(host[i:i + 4][::-1] for i in range(0, len(host), 4))
    return socket.inet_ntop(socket.AF_INET if len(words) == 4 else socket.AF_INET6, words)


def listening_addresses(pids: list[int]) -> set[tuple[str, int]]:
    """(host, port) of every TCP socket in state LISTEN held open by one of `pids`."""
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # exited meanwhile
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.add((_address(fields[1]), int(fields[1].split(":")[1], 16)))
    return found


class ListenerWatch:
    """Samples, in a thread, the listening addresses of some processes and their descendants."""

    def __init__(self, pids: list[int], every_s: float = 0.2) -> None:
        self.pids, self.every_s = pids, every_s
        self.seen: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.seen |= listening_addresses(tree(self.pids))

    def __enter__(self) -> "ListenerWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
