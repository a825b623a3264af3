"""Writing matplotlib figures: the one way every plot vitlab makes is saved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.text import Text


def save_figure(figure: Figure, path: str | Path, **savefig: Any) -> Path:
    """`figure` written to `path`, its folder created. A name that is not UTF-8 (a file or folder name
    from os.listdir holds a surrogate for each such byte, which matplotlib's fonts refuse) is drawn
    with U+FFFD for each of those bytes."""
    for text in figure.findobj(Text):
        value = text.get_text()
        if any("\udc80" <= char <= "\udcff" for char in value):
            text.set_text(value.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, **savefig)
    return path
