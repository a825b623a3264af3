"""The commands raise vitlab's own error types for a user's mistake (vitlab/errors.py), not bare
ValueError or FileNotFoundError, which a bug raises too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CLI = Path(__file__).resolve().parents[2] / "src" / "vitlab" / "cli"
GENERIC = {"ValueError", "FileNotFoundError"}


def generic_raises(path: Path) -> list[str]:
    """`file:line` of each `raise ValueError(...)` or `raise FileNotFoundError(...)` in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name):
            if node.exc.func.id in GENERIC:
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_commands_raise_vitlab_error_types():
    found = [where for path in sorted(CLI.glob("*.py")) for where in generic_raises(path)]
    assert not found, f"raise vitlab's error types (InputError, ConfigError) for bad input: {found}"
