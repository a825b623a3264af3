"""One run per output folder: an exclusive OS lock on DIR/.vitlab.lock for the whole run.

Two runs writing the same folder corrupt each other (one removes the other's half-written
checkpoint; a --resume beside a live run repeats its metrics rows). The lock is an flock (via
`filelock`), which the kernel releases when its holder dies, so a killed run leaves nothing stale.
Its holder writes its host, PID and start time into DIR/.vitlab.lock.holder, so that a second run
can say which run holds the folder. Under torchrun, process 0 holds it for all processes.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from filelock import FileLock, Timeout

from vitlab.model import ConfigError

LOCK_FILE = ".vitlab.lock"
HOLDER_FILE = ".vitlab.lock.holder"


class RunLock:
    """`acquire()` takes DIR's lock at once or raises ConfigError naming its holder; `release()` frees it."""

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out)
        self._lock = FileLock(self.out / LOCK_FILE)
        self._holder = ""

    @property
    def held(self) -> bool:
        return self._lock.is_locked

    def acquire(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(timeout=0)  # no waiting: the other run may go on for days
        except Timeout:
            raise ConfigError(
                f"run.out: {self.out} is in use by another run ({self._describe_holder()}); wait "
                f"for it to end or choose another --out"
            ) from None
        self._holder = f"host {socket.gethostname()} PID {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"
        holder = self.out / HOLDER_FILE
        temporary = holder.with_name(f"{holder.name}.{os.getpid()}")
        temporary.write_text(self._holder + "\n")
        os.replace(temporary, holder)  # a reader sees the old holder or the new one, never half a line

    def release(self) -> None:
        if not self.held:
            return
        holder = self.out / HOLDER_FILE
        try:
            if holder.read_text().strip() == self._holder:
                holder.unlink()
        except OSError:
            pass
        self._lock.release()

    def _describe_holder(self) -> str:
        try:
            return self.out.joinpath(HOLDER_FILE).read_text().strip() or "its holder not yet recorded"
        except OSError:
            return f"its holder not recorded in {HOLDER_FILE}"
