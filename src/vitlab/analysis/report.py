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


@dataclass
class ReportTable:
    title: str
    columns: list[str]
    rows: list[list[str]]
    caption: str = ""


_STYLE = """
body { font-family: sans-serif; max-width: 980px; margin: 2em auto; color: #222; }
section { margin-bottom: 2.5em; }
img { max-width: 100%; border: 1px solid #ddd; }
p.caption { color: #555; font-size: 0.92em; }
pre { background: #f6f6f6; padding: 1em; overflow: auto; max-height: 30em; font-size: 0.8em; }
ul.notes { color: #8a4b00; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
"""


def write_report(
    path: str | Path,
    title: str,
    figures: Sequence[ReportFigure],
    numbers: dict[str, Any],
    notes: Sequence[str] = (),
    tables: Sequence[ReportTable] = (),
) -> Path:
    """Write the page to `path`; the PNGs are embedded (data: URIs), so the page can be moved on its
    own and asks nothing of the network. Tables come after the figures, then the numbers as JSON."""
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
    for table in tables:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in table.rows)
        parts += [
            "<section>",
            f"<h2>{html.escape(table.title)}</h2>",
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>",
            f'<p class="caption">{html.escape(table.caption)}</p>' if table.caption else "",
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
