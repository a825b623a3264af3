"""SIGINT and SIGTERM during training: the first asks the run to stop after the current step (with a
checkpoint), and the run then ends with Interrupted; a second acts as it would have without the trainer
(e.g. Ctrl-C twice stops at once)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def install_stop_handlers(request_stop: Callable[[str], None]) -> dict[int, Any]:
    """Route SIGINT and SIGTERM to `request_stop(name)`, once each; the handlers they replace, for
    restore_handlers. Outside the main thread (where Python cannot set handlers), nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict[int, Any] = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def handler(signum: int, frame: Any) -> None:
        request_stop(signal.Signals(signum).name)
        signal.signal(signum, previous[signum])  # a second signal acts as it would have

    for sig in previous:
        signal.signal(sig, handler)
    return previous


def restore_handlers(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@contextmanager
def stop_requests(request_stop: Callable[[str], None]) -> Iterator[None]:
    """install_stop_handlers for the length of a `with` block."""
    previous = install_stop_handlers(request_stop)
    try:
        yield
    finally:
        restore_handlers(previous)


class Interrupted(Exception):
    """SIGINT or SIGTERM stopped the run after a checkpoint was written."""

    def __init__(self, signal_name: str, step: int, checkpoint: Path | None) -> None:
        super().__init__(f"{signal_name} at step {step}; checkpoint {checkpoint}")
        self.signal_name, self.step, self.checkpoint = signal_name, step, checkpoint
