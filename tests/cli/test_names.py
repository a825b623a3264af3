"""One name per idea on the command line: every flag's choices are its config field's one list of
allowed values, and the older spellings of renamed flags give the same config as the new ones."""

from __future__ import annotations

import argparse
import dataclasses
import typing

import pytest

from vitlab import runtime
from vitlab.cli import build_parser
from vitlab.cli.train import FLAG_KEYS, build_config
from vitlab.config_fields import literal_values
from vitlab.training.config import SECTIONS

pytestmark = pytest.mark.unit


def _commands() -> dict[str, argparse.ArgumentParser]:
    (subparsers,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subparsers.choices)


def _choices(parser: argparse.ArgumentParser) -> dict[str, tuple]:
    return {action.dest: tuple(action.choices) for action in parser._actions if action.choices is not None}


# Each TrainConfig key with a Literal type -> its allowed values, the one definition.
LITERAL_KEYS = {
    f"{section}.{f.name}": values
    for section, cls in SECTIONS.items()
    for f in dataclasses.fields(cls)
    if (values := literal_values(typing.get_type_hints(cls)[f.name])) is not None
}


@pytest.mark.parametrize("command", ["train", "finetune"])
def test_training_flag_choices_are_the_config_fields_literals(command):
    choices = _choices(_commands()[command])
    checked = {dest for dest in choices if FLAG_KEYS.get(dest) in LITERAL_KEYS}
    assert checked >= {"device", "precision", "data_parallel"}
    for dest in checked:
        assert choices[dest] == LITERAL_KEYS[FLAG_KEYS[dest]], dest


def test_device_and_precision_choices_are_one_list_on_every_command():
    seen = []
    for name, parser in _commands().items():
        choices = _choices(parser)
        for dest, values in (("device", runtime.DEVICES), ("precision", runtime.PRECISIONS)):
            if dest in choices:
                assert choices[dest] == values, (name, dest)
                seen.append((name, dest))
    # the commands that run a model: train, finetune, predict, eval take both; analyze and fewshot a device
    assert {name for name, _ in seen} >= {"train", "finetune", "predict", "eval", "analyze", "fewshot"}
    assert LITERAL_KEYS["run.device"] == runtime.DEVICES and LITERAL_KEYS["run.precision"] == runtime.PRECISIONS
    assert set(runtime.DTYPES) == set(runtime.PRECISIONS) - {"auto"}


def test_every_command_that_reads_a_model_spells_it_ckpt():
    for name in ("predict", "eval", "analyze", "export", "serve", "fewshot", "finetune"):
        flags = {flag for action in _commands()[name]._actions for flag in action.option_strings}
        assert "--ckpt" in flags, name


def _config(argv: list[str]):
    args = build_parser().parse_args(argv)
    return build_config(args)


@pytest.mark.parametrize(
    "old, new",
    [
        (["--init", "B/16"], ["--ckpt", "B/16"]),
        (["--ckpt", "B/16", "--grad-ckpt"], ["--ckpt", "B/16", "--grad-checkpointing"]),
    ],
)
def test_older_spellings_give_the_same_config(old, new):
    common = ["finetune", "--data", "digits", "--out", "x", "--steps", "3"]
    before, after = _config([*common, *old]), _config([*common, *new])
    assert before == after
    assert after.model.init == "B/16"
    assert after.run.grad_checkpointing is ("--grad-checkpointing" in new)


def test_grad_checkpointing_flag_sets_the_field_on_train():
    common = ["train", "--data", "digits", "--steps", "3"]
    assert not _config(common).run.grad_checkpointing
    assert _config([*common, "--grad-ckpt"]) == _config([*common, "--grad-checkpointing"])
    assert _config([*common, "--grad-checkpointing"]).run.grad_checkpointing


def test_models_family_choices_are_the_registered_families():
    from vitlab.model.registry import FAMILIES

    assert _choices(_commands()["models"])["family"] == (*FAMILIES, "all")
