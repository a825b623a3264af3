"""The documentation site's reference pages are written from the code: a flag added to a command, a
field added to a config and a name added to `vitlab.__all__` appear in them without a word of docs."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

import vitlab
from vitlab.cli import build_parser
from vitlab.cli.reference import api_reference, cli_reference, config_reference
from vitlab.config_fields import Range
from vitlab.config_options import option

pytestmark = pytest.mark.unit


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return subparsers.choices[name]


def _section(markdown: str, heading: str) -> str:
    return markdown.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_a_new_flag_appears_under_its_command():
    parser = build_parser()
    _subcommand(parser, "predict").add_argument(
        "--brand-new", metavar="N", type=int, default=7, help="a flag | that no page describes"
    )
    page = cli_reference(parser)
    assert "| `--brand-new` `N` | a flag \\| that no page describes | `7` |" in _section(page, "vitlab predict")
    assert "--brand-new" not in _section(page, "vitlab train")


def test_every_flag_of_every_command_is_listed():
    parser = build_parser()
    page = cli_reference(parser)
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in subparsers.choices.items():
        section = _section(page, f"vitlab {name}")
        for action in command._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help") and action.help != argparse.SUPPRESS:
                    assert f"`{flag}`" in section, f"vitlab {name} {flag}"


@dataclass
class _Optim:
    lr: float = option(1e-3, help="the peak learning rate", flags=("--lr",), range=Range(0, low_open=True))
    momentum: float = option(0.9, help="new in this test", resumable=True)


@dataclass
class _Config:
    optim: _Optim = field(default_factory=_Optim)


def test_a_new_config_field_appears_with_its_declaration():
    page = config_reference(_Config)
    assert "## optim" in page
    rows = [line for line in page.splitlines() if line.startswith("| `optim.")]
    assert rows[0].startswith("| `optim.lr` | a number | `0.001` | `--lr` | the peak learning rate; range: ")
    assert rows[1] == "| `optim.momentum` | a number | `0.9` |  | new in this test; *resumable* |"


def test_every_public_name_has_its_api_block():
    page = api_reference()
    blocks = [line.removeprefix("::: ") for line in page.splitlines() if line.startswith("::: ")]
    assert [block.rsplit(".", 1)[1] for block in blocks] == list(vitlab.__all__)
    assert "vitlab.weights.load.load" in blocks  # the function, not its module of the same name
