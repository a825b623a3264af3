"""The `vitlab` command's argument parser: argparse's, with "did you mean" in its errors for a mistyped
command, choice or flag (`vitlab trian`, `--device cuad`, `--lrr 0.1`)."""

from __future__ import annotations

import argparse
import typing
from collections.abc import Sequence
from typing import Any

from vitlab.suggestions import did_you_mean


class CommandParser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are one line, as vitlab's other errors: the message names
    the flag and the rule, and `--help` gives the usage. Subcommands' parsers are of this class too
    (add_subparsers takes the parent's)."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as error:
            choices = list(action.choices or ())  # with one choice, argparse's "choose from" already says it
            hint = did_you_mean(value, choices) if isinstance(value, str) and len(choices) > 1 else ""
            raise argparse.ArgumentError(action, f"{error.message}{hint}") from None

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            flags = chosen_flags(self, parsed)
            hints = [
                f"{word}{hint}"
                for word in extras
                if word.startswith("-") and (hint := did_you_mean(word.partition("=")[0], flags))
            ]
            self.error(f"unrecognized arguments: {' '.join(extras)}" + (f"; {', '.join(hints)}" if hints else ""))
        return parsed


def chosen_flags(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> list[str]:
    """The flags of `parser` and of the subcommands `parsed` chose, down to the last."""
    flags: list[str] = []
    current: argparse.ArgumentParser | None = parser
    while current is not None:
        chosen = None
        for action in current._actions:
            flags.extend(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
        current = chosen
    return flags
