"""One self-contained HTML page: every figure (embedded as PNG data) and the numbers behind them."""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class ReportFigure:
    title: str
    path: Path  # a PNG
    caption: str = ""


_STYLE = """
body { font-family: sans-serif; max-width: 980px; margin: 2em auto; color: #222; }
section { margin-bottom: 2.5em; }
img { max-width: 100%; border: 1px solid #ddd; }
p.caption { color: #555; font-size: 0.92em; }
pre { background: #f6f6f6; padding: 1em; overflow: auto; max-height: 30em; font-size: 0.8em; }
ul.notes { color: #8a4b00; }
"""


def write_report(
    path: str | Path,
    title: str,
    figures: Sequence[ReportFigure],
    numbers: dict[str, Any],
    notes: Sequence[str] = (),
) -> Path:
    """Write the page to `path`; the PNGs are embedded, so the page can be moved on its own."""
    path = Path(path)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    for figure in figures:
        data = base64.b64encode(Path(figure.path).read_bytes()).decode("ascii")
        parts += [
            "<section>",
            f"<h2>{html.escape(figure.title)}</h2>",
            f'<img src="data:image/png;base64,{data}" alt="{html.escape(figure.title)}">',
            f'<p class="caption">{html.escape(figure.caption)} ({html.escape(Path(figure.path).name)})</p>',
            "</section>",
        ]
    parts += [
        "<section><h2>Numbers</h2>",
        f"<pre>{html.escape(json.dumps(numbers, indent=1))}</pre></section>",
        "</body></html>",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
