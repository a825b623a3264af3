"""Docstrings and comments under src/ explain the code; figures measured on a machine (times, rates, load
averages) go to docs/benchmarks.md or a commit body, where they carry their machine and date."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from helpers import REPO_ROOT

pytestmark = pytest.mark.unit

NUMBER = r"\d+(?:[.,]\d+)?"
DURATION = r"(?:s|sec|seconds?|min|minutes?|h|hours?)"
TIMING = re.compile(
    "|".join(
        [
            rf"\b{NUMBER}\s?(?:ms|µs|us|ns)\b",  # 3.3 ms
            rf"\b{NUMBER}\s?[GTM]FLOP/?s\b|\b{NUMBER}\s?[GT]FLOPS\b",  # 60 GFLOP/s
            rf"\b{NUMBER}\s?(?:img|imgs|images?|samples?|tokens?|steps?|it|batches)\s?/\s?s\b",  # 126 images/s
            rf"\bload(?: average)?(?: of)?\s?~?{NUMBER}\b",  # (load 14)
            rf"\b{NUMBER}\s?{DURATION}\b(?: \w+){{0,3}} (?:against|vs\.?|versus) {NUMBER}",  # 6.27 s against 6.30
            rf"\b{NUMBER}\s?x (?:faster|slower)\b",  # 60x slower
            rf"\b{NUMBER}\s?{DURATION} (?:on|with) {NUMBER} (?:CPU )?cores?\b",  # 70 s on 2 CPU cores
            rf"\b(?:took|takes|trained in|ran in|runs in) (?:about )?~?{NUMBER}\s?{DURATION}\b",  # took 14.6 minutes
        ]
    )
)


def prose(path: Path):
    """(line, text) of every comment and docstring in a module."""
    source = path.read_text()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                for offset, line in enumerate(docstring.splitlines()):
                    yield node.body[0].lineno + offset, line


def timing_figures(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}:{line}: {match.group(0)!r}"
        for path in sorted(root.rglob("*.py"))
        for line, text in prose(path)
        for match in TIMING.finditer(text)
    ]


def test_no_docstring_or_comment_under_src_carries_a_timing_figure():
    found = timing_figures(REPO_ROOT / "src")
    assert not found, "measured figures belong in docs/benchmarks.md or the commit body:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "text",
    [
        "# S/16 at batch 16 ran 3.3 ms per layer",
        '"""MKL took its generic path at 198 GFLOP/s."""',
        "# from 62 to 126 images/s (batch 32)",
        "# 6.27 s against 6.30 s per batch (load 14).",
        "# the bf16 GEMM ran 60x slower than fp32",
        "# trained in 70 s on 2 CPU cores shared with other work",
        "# With them standard took 14.6 minutes on a cold cache",
    ],
)
def test_each_kind_of_figure_is_found(tmp_path, text):
    (tmp_path / "module.py").write_text(f"{text}\nx = 1\n" if text.startswith("#") else f"{text}\n")
    assert timing_figures(tmp_path)
