"""One writer per output: an exclusive OS lock held for as long as a run writes there.

Two runs writing one training folder corrupt each other (one removes the other's half-written
checkpoint; a --resume beside a live run repeats its metrics rows), and two `vitlab predict` runs
appending to one --out each predict every file, so that the file holds them twice. The lock is an
flock (via `filelock`), which the kernel releases when its holder dies, so a killed run leaves
nothing stale. Its holder writes its host, PID and start time beside the lock (LOCK.holder), so
that a second run can say which run holds it. Under torchrun, process 0 holds a training folder's
lock for all processes.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from vitlab.errors import ConfigError

LOCK_FILE = ".vitlab.lock"  # in a training run's folder
HOLDER_FILE = ".vitlab.lock.holder"


class RunLock:
    """`acquire()` takes the lock of `out` at once or raises ConfigError naming its holder (and the
    option, `argument`, that chose `out`); `release()` frees it. `out` is a run folder, locked by
    out/.vitlab.lock; RunLock.beside locks a single output file instead."""

    def __init__(self, out: str | Path, argument: str = "run.out", lock: Path | None = None) -> None:
        self.out = Path(out)
        self.argument = argument
        self.lock_path = lock if lock is not None else self.out / LOCK_FILE
        self.holder_path = self.lock_path.with_name(f"{self.lock_path.name}.holder")
        self._lock = FileLock(self.lock_path)
        self._holder = ""

    @classmethod
    def beside(cls, file: str | Path, argument: str) -> RunLock:
        """The lock of one output file, hidden beside it (predict's --out top.csv: .top.csv.lock)."""
        file = Path(file)
        return cls(file, argument, lock=file.with_name(f".{file.name}.lock"))

    @property
    def held(self) -> bool:
        return self._lock.is_locked

    def acquire(self) -> None:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(timeout=0)  # no waiting: the other run may go on for days
        except Timeout:
            raise ConfigError(
                f"{self.argument}: {self.out} is in use by another run ({self._describe_holder()}); wait "
                f"for it to end or choose another {self.argument}"
            ) from None
        self._holder = f"host {socket.gethostname()} PID {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"
        temporary = self.holder_path.with_name(f"{self.holder_path.name}.{os.getpid()}")
        temporary.write_text(self._holder + "\n")
        os.replace(temporary, self.holder_path)  # a reader sees the old holder or the new one, never half a line

    @contextlib.contextmanager
    def released_if_failing(self) -> Iterator[None]:
        """Frees the lock (if held) when the block raises: its holder failed to open what the lock guards."""
        try:
            yield
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        if not self.held:
            return
        try:
            if self.holder_path.read_text().strip() == self._holder:
                self.holder_path.unlink()
        except OSError:
            pass
        self._lock.release()

    def _describe_holder(self) -> str:
        try:
            return self.holder_path.read_text().strip() or "its holder not yet recorded"
        except OSError:
            return f"its holder not recorded in {self.holder_path.name}"
