"""Each training option is declared once, as its TrainConfig field (vitlab.config_options.option), and
everything else is derived from that: the flags of `vitlab train` and `finetune`, the flag-to-key
table, the range checks and the settings a resumed run may change. These tests iterate every field."""

from __future__ import annotations

import argparse
import typing

import pytest

from vitlab.cli import build_parser
from vitlab.cli.train import FLAG_KEYS, build_config
from vitlab.config_fields import ConfigError, Range, literal_values
from vitlab.config_options import declared_options
from vitlab.training.checkpoint import RESUMABLE_CHANGES
from vitlab.training.config import TrainConfig

pytestmark = pytest.mark.unit

DECLARED = list(declared_options(TrainConfig))
FLAGGED = [d for d in DECLARED if d.option.flags]
RANGED = [d for d in DECLARED if d.option.range is not None]


def parse(command: str, *argv: str) -> argparse.Namespace:
    needed = ["--ckpt", "B/16"] if command == "finetune" else []
    return build_parser().parse_args([command, *needed, *argv])


def samples(declared) -> list[tuple[str, object]]:
    """Command-line words for the flag of `declared`, each with the value the field should then hold."""
    kind = typing.get_args(declared.annotation) or (declared.annotation,)
    choices = literal_values(declared.annotation)
    if declared.option.const is not None and choices is not None:
        return [("", declared.option.const)]
    if bool in kind:
        return [("", True)]
    if choices is not None:
        return [(str(choice), choice) for choice in reversed(choices)]
    if int in kind:
        return [("2", 2)]
    if float in kind:
        return [("0.5", 0.5)]
    return [("somewhere", "somewhere")]


@pytest.mark.parametrize("declared", DECLARED, ids=[d.key for d in DECLARED])
def test_every_field_is_declared_with_its_help(declared):
    assert declared.option.help, f"{declared.key}: declare its help in option(...)"


@pytest.mark.parametrize("declared", FLAGGED, ids=[d.key for d in FLAGGED])
def test_every_flag_sets_its_field(declared):
    """Through the real parser and build_config, under each command that offers it (a choice that the
    recipe's other settings refuse, such as mpp beside mixup, is passed over for the next)."""
    length = [] if declared.key.startswith("schedule.") else ["--steps", "4"]
    section, _, name = declared.key.partition(".")
    for command in declared.option.commands or ("train", "finetune"):
        set_values = []
        for word, value in samples(declared):
            argv = [declared.option.flags[-1], *([word] if word else [])]  # the last spelling: an alias too
            try:
                config = build_config(parse(command, *argv, *length))
            except ConfigError:
                continue
            assert getattr(getattr(config, section), name) == value, (command, argv)
            set_values.append(value)
        assert set_values, f"{declared.key}: no sample value was accepted under {command}"
    assert FLAG_KEYS[declared.dest] == declared.key


@pytest.mark.parametrize("declared", RANGED, ids=[d.key for d in RANGED])
def test_every_declared_range_refuses_a_value_outside_it_naming_key_and_rule(declared):
    bound: Range = declared.option.range
    outside = (bound.low if bound.low_open else bound.low - 1) if bound.low is not None else bound.high + 1
    kind = typing.get_args(declared.annotation) or (declared.annotation,)
    outside = int(outside) if int in kind and float not in kind else float(outside)
    config = TrainConfig(**{})
    config.schedule.steps = 10
    section, _, name = declared.key.partition(".")
    setattr(getattr(config, section), name, outside)
    origin = f"--{name.replace('_', '-')}"
    with pytest.raises(ConfigError) as refused:
        config.validate({declared.key: origin})
    message = str(refused.value)
    assert message == f"{origin}: {declared.key}={outside!r}: {bound.rule()}"


def test_the_flag_table_and_the_resumable_settings_come_from_the_declarations():
    assert FLAG_KEYS == {d.dest: d.key for d in FLAGGED}
    assert RESUMABLE_CHANGES == {d.key for d in DECLARED if d.option.resumable}
    # the settings a resumed run could change before the declarations, unchanged by them
    assert RESUMABLE_CHANGES == {
        *(f"run.{name}" for name in ("out", "device", "precision", "eval_every", "log_every", "ckpt_every_steps")),
        *(f"run.{name}" for name in ("ckpt_every_minutes", "keep_ckpts", "resume", "compile", "grad_checkpointing")),
        *(f"run.{name}" for name in ("threads", "max_bad_steps", "memory_limit", "tensorboard")),
        *(f"data.{name}" for name in ("workers", "eval_batch_size", "download")),
    }


def test_a_range_says_its_rule():
    assert Range(0, low_open=True).rule() == "must be > 0"
    assert Range(1, or_null=True).rule() == "must be >= 1 or null"
    assert Range(0, 1, high_open=True).rule() == "must be in [0, 1)"
    assert Range(0, 180, unit="degrees").rule() == "must be in [0, 180] degrees"
    assert Range(0, low_open=True, unit="GiB", or_null=True).rule() == "must be > 0 GiB or null"
    assert Range(0, 1, low_open=True).holds((0.5, 1.0)) and not Range(0, 1, low_open=True).holds((0.0, 1.0))
    assert Range(1).holds(None)
