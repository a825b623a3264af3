"""Where vitlab's log lines go when it is used from Python.

Every module logs to the "vitlab" logger. The command line configures logging itself; a script that
calls `vitlab.train(...)` without configuring logging would see none of the INFO lines (Python shows
only warnings then), so `ensure_handler()` adds one that prints them to stderr. It steps aside as
soon as the program configures logging (e.g. `logging.basicConfig(...)`, a handler on the root
logger or on "vitlab"): nothing is printed twice.
"""

from __future__ import annotations

import logging
import sys

LOGGER = "vitlab"


class FallbackHandler(logging.StreamHandler):
    """Prints to the current sys.stderr while the root logger has no handler of its own."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        # Logging configured since: the root's handlers print the record.
        if logging.getLogger().handlers:
            return
        # The stream of now (a test's capture, a redirected stderr), not the one at install time.
        self.setStream(sys.stderr)
        super().emit(record)


def ensure_handler() -> None:
    """Install FallbackHandler on the "vitlab" logger unless the program has configured logging."""
    logger = logging.getLogger(LOGGER)
    if logging.getLogger().handlers or logger.handlers:
        return
    logger.addHandler(FallbackHandler())
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
