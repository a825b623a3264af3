""" "Did you mean": the names that exist closest to a mistyped one (difflib's ratio), for the one-line
errors of unknown commands, flags, recipes, config keys and choices."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_names(word: str, names: Iterable[object], count: int = 2) -> list[str]:
    """Up to `count` of `names` closest to `word`, best first, compared without case, leading dashes
    (flags) or a section before a dot (`optim.lr`: what differs is the field); none below difflib's
    default cut-off (0.6 of the characters in common)."""
    by_folded: dict[str, str] = {}
    for name in map(str, names):
        by_folded.setdefault(_folded(name), name)
    return [by_folded[m] for m in difflib.get_close_matches(_folded(str(word)), list(by_folded), n=count)]


def _folded(name: str) -> str:
    return name.casefold().lstrip("-").rpartition(".")[2]


def did_you_mean(word: str, names: Iterable[object]) -> str:
    """ " (did you mean X?)" or " (did you mean X or Y?)" for the names close to `word`; "" for none."""
    matches = close_names(word, names)
    return f" (did you mean {' or '.join(matches)}?)" if matches else ""
