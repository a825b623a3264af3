"""Declaring an option once, as its config field: `option(default, help=..., flags=("--lr",),
range=Range(0, low_open=True), resumable=False)` keeps the declaration (an `Option`) in the field's
metadata, from which the command line's flags, the flag-to-key table, the range checks and the keys
a resumed run may change are all derived (`declared_options`, `range_checks`, `resumable_keys`)."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from vitlab.config_fields import Range, lookup, sections


@dataclass(frozen=True)
class Option:
    """One setting's declaration, held in its dataclass field's metadata."""

    help: str = ""
    flags: tuple[str, ...] = ()  # its command-line spellings, the first the one --help shows; () for none
    commands: tuple[str, ...] = ()  # the commands that offer the flag; () every one that takes the config
    metavar: str | None = None
    range: Range | None = None
    resumable: bool = False  # a resumed run may change it: it decides how the run executes, not what it learns
    const: Any = None  # the value of the flag given alone (`--ema` is --ema 0.9999; `--gpu-decode` is "cuda")


OPTION = "vitlab.option"  # the metadata key


def option(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, **declared: Any) -> Any:
    """A dataclass field declaring an option (see Option): `lr: float = option(1e-3, flags=("--lr",), ...)`."""
    metadata = {OPTION: Option(**declared)}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Declared:
    """A declared option of a config of sections: its key, its type and its declaration."""

    key: str  # "optim.lr"
    annotation: Any
    option: Option

    @property
    def dest(self) -> str:
        """The argparse destination of its flag: the first flag without dashes, in snake case."""
        return self.option.flags[0].lstrip("-").replace("-", "_")


def declared_options(cls: type) -> Iterator[Declared]:
    """Every field of every section of the config class `cls`, with its Option (an empty one where the
    field declares none), in declaration order."""
    for section, section_cls in sections(cls).items():
        hints = typing.get_type_hints(section_cls)
        for f in dataclasses.fields(section_cls):
            yield Declared(f"{section}.{f.name}", hints[f.name], f.metadata.get(OPTION, Option()))


def range_checks(config: Any) -> list[tuple[str, bool, str]]:
    """(key, holds, rule) of every field whose declaration has a Range."""
    return [
        (d.key, d.option.range.holds(lookup(config, d.key)), d.option.range.rule())
        for d in declared_options(type(config))
        if d.option.range is not None
    ]


def resumable_keys(cls: type) -> frozenset[str]:
    """The keys a resumed run may change (declared `resumable`)."""
    return frozenset(d.key for d in declared_options(cls) if d.option.resumable)
