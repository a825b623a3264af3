"""--print-config shows the resolved recipe and does nothing else; every command's --help ends with
examples that parse; train's --help lists the recipes' settings from the registry; eval's report name."""

from __future__ import annotations

import argparse
import json
import shlex

import pytest
import yaml

from helpers import TINY_FLAGS, tiny_config
from vitlab.cli import build_parser, main
from vitlab.cli.train import build_config
from vitlab.training import Trainer
from vitlab.training.recipes import RECIPES, get_recipe


def all_parsers(parser: argparse.ArgumentParser, prefix: str = "vitlab") -> dict[str, argparse.ArgumentParser]:
    """Every command and sub-command that runs something, by its command line ("vitlab weights list")."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[f"{prefix} {name}"] = sub
                found.update(all_parsers(sub, f"{prefix} {name}"))
    return found


@pytest.mark.unit
def test_print_config_prints_the_resolved_config_and_creates_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    flags = [
        "train",
        *TINY_FLAGS,
        "--out",
        str(out),
        "--keep-best-by",
        "val_loss",
        "--early-stop-patience",
        "3",
        "--tensorboard",
    ]
    assert main([*flags, "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert not out.exists()
    # what run.yaml would hold
    assert printed == build_config(build_parser().parse_args(flags)).to_yaml()
    run = yaml.safe_load(printed)
    assert (run["recipe"], run["model"]["variant"], run["schedule"]["steps"]) == (
        "small-data",
        "mu/4",
        20,
    )
    assert (
        run["run"]["keep_best_by"],
        run["run"]["early_stop_patience"],
        run["run"]["tensorboard"],
    ) == ("val_loss", 3, True)
    # finetune: the checkpoint is named, not read
    assert (
        main(
            [
                "finetune",
                "--ckpt",
                str(tmp_path / "absent"),
                "--data",
                "digits",
                "--out",
                str(out),
                "--print-config",
            ]
        )
        == 0
    )
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["recipe"] == "finetune" and not out.exists()
    # The checkpoint's own size, a workstation's batch and length: the paper's scale only when asked.
    assert (printed["model"]["image_size"], printed["data"]["batch_size"], printed["schedule"]["steps"]) == (
        None,
        128,
        500,
    )


@pytest.mark.unit
def test_every_command_help_ends_with_examples_that_parse():
    parsers = all_parsers(build_parser())
    assert {
        "vitlab train",
        "vitlab finetune",
        "vitlab eval",
        "vitlab weights fetch",
    } <= parsers.keys()
    for command, parser in parsers.items():
        lines = parser.format_help().rstrip().splitlines()
        heading = max(i for i, line in enumerate(lines) if line == "examples:")
        examples = [line.strip() for line in lines[heading + 1 :]]
        assert 1 <= len(examples) <= 3, command
        for example in examples:
            words = shlex.split(example, comments=True)
            assert " ".join(words[: len(command.split())]) == command, example
            # argparse exits on a flag the command lacks
            build_parser().parse_args(words[1:])


@pytest.mark.unit
def test_train_help_lists_the_recipes_of_the_registry(monkeypatch):
    config = get_recipe("demo")
    config.optim.lr, config.model.variant = 0.0123, "mu/4"
    monkeypatch.setitem(RECIPES, "made-up", lambda: config)
    for command in ("vitlab train", "vitlab finetune"):
        text = all_parsers(build_parser())[command].format_help()
        assert "  made-up: mu/4, adamw lr 0.0123, batch 64, 1200 steps, cosine decay" in text
        for name in RECIPES:
            recipe = get_recipe(name)
            line = next(line for line in text.splitlines() if line.startswith(f"  {name}: "))
            assert f"lr {recipe.optim.lr:g}, batch {recipe.data.batch_size}" in line, line


@pytest.mark.integration
def test_eval_report_is_named_as_the_run_outputs(tmp_path, capsys):
    run = tmp_path / "run"
    Trainer(tiny_config(run, schedule={"steps": 2}, run={"eval_every": 2})).fit()
    assert main(["eval", "--ckpt", str(run)]) == 0
    report = json.loads((run / "eval_summary.json").read_text())
    assert report["metrics"]["top1"] == json.loads((run / "summary.json").read_text())["val_top1"]
    assert not (run / "eval.json").exists()  # the earlier name is no longer written
    assert f"written to {run / 'eval_summary.json'}" in capsys.readouterr().out


@pytest.mark.unit
@pytest.mark.fault("bad-config", kinds=1)
def test_a_bad_patience_is_one_line(tmp_path, capsys):
    assert (
        main(
            [
                "train",
                *TINY_FLAGS,
                "--out",
                str(tmp_path / "o"),
                "--early-stop-patience",
                "0",
                "--print-config",
            ]
        )
        == 2
    )
    assert "--early-stop-patience: run.early_stop_patience=0: must be >= 1 or null" in capsys.readouterr().err


@pytest.mark.unit
def test_every_option_and_argument_of_every_command_has_help_text():
    missing = [
        f"{command} {' / '.join(action.option_strings) or action.dest}"
        for command, parser in all_parsers(build_parser()).items()
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) and not action.help
    ]
    assert not missing, missing
