"""Progress bars for long work (evaluation, prediction, features, analysis, export).

A tqdm bar on stderr when stderr is a terminal, as the trainer's ProgressBar decides; never when
stderr is a file or a pipe (logs stay clean), nor after `disable_progress()` (`vitlab --no-progress`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")

_enabled = True


def disable_progress(disabled: bool = True) -> None:
    """Turn every vitlab progress bar off (or back on) for this process."""
    global _enabled
    _enabled = not disabled


def progress_enabled() -> bool:
    return _enabled and sys.stderr.isatty()


def progress(items: Iterable[T], desc: str, *, total: int | None = None, unit: str = "batch") -> Iterator[T]:
    """`items`, wrapped in a bar that closes when the loop ends (or is left early)."""
    if not progress_enabled():
        yield from items
        return
    with tqdm(
        items,
        desc=desc,
        total=total,
        unit=unit,
        leave=False,
        dynamic_ncols=True,
        file=sys.stderr,
    ) as bar:
        yield from bar
