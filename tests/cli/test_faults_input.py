"""Bad configs and checkpoints handed to the command line (issue 6): each is one line naming the file
(or flag) and the problem, exit status 2, no traceback, and no code from the file ever runs.
Property-based: any value for any config key either validates or raises ConfigError."""

from __future__ import annotations

import dataclasses
import re
import shutil
import typing
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from helpers import TINY_FLAGS, MarkerPayload, one_line_error, tiny_config
from vitlab.config_fields import apply_mapping, coerce, set_value
from vitlab.model import ConfigError, ViTConfig, create_untrained
from vitlab.textfiles import parse_assignment
from vitlab.training import Trainer, get_recipe
from vitlab.training.checkpoint import record_checksums
from vitlab.training.config import SECTIONS


# -- configs -------------------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.fault("bad-fields")
@pytest.mark.parametrize(
    "content, flags, expected",
    [
        (
            "optim:\n  lrr: 0.1\n",
            [],
            r"cfg\.yaml: unknown key 'optim\.lrr' \(did you mean optim\.lr\?\); optim has name, lr,",
        ),
        ("optimiser:\n  lr: 0.1\n", [], r"cfg\.yaml: unknown key 'optimiser\.lr'; keys are SECTION\.FIELD"),
        ("data:\n  batch_size: many\n", [], r"cfg\.yaml: data\.batch_size: expected an integer, got str 'many'"),
        ("optim:\n  betas: [0.9]\n", [], r"cfg\.yaml: optim\.betas: expected a list of 2 \(a number, a number\)"),
        ("data:\n  batch_size: 0\n", [], r"cfg\.yaml: data\.batch_size=0: must be > 0"),
        ("run:\n  max_bad_steps: 0\n", [], r"cfg\.yaml: run\.max_bad_steps=0: must be >= 1"),
        ("optim: {lr: [1, 2\n", [], r"cfg\.yaml: not valid YAML"),
        ("- a list\n- of things\n", [], r"cfg\.yaml: expected a mapping of sections, got list"),
        ("", ["--set", "optim.lr=-1"], r"--set optim\.lr=-1: optim\.lr=-1\.0: must be > 0"),
        (
            "",
            ["--set", "augment.mixup=yes please"],
            r"--set augment\.mixup=yes please: augment\.mixup: expected a number",
        ),
        ("", ["--set", "lr=0.1"], r"unknown key 'lr'.*did you mean optim\.lr\?"),
        ("", ["--batch-size", "-4"], r"--batch-size: data\.batch_size=-4: must be > 0"),
        ("", ["--keep-ckpts", "0"], r"--keep-ckpts: run\.keep_ckpts=0: must be >= 1"),
    ],
)
def test_bad_configs_name_the_file_or_flag_and_the_problem(tmp_path, capsys, content, flags, expected):
    config = tmp_path / "cfg.yaml"
    config.write_text(content)
    line = one_line_error(capsys, ["train", "--out", str(tmp_path / "run"), "--config", str(config), *flags])
    assert line.startswith("vitlab train: error: ")
    assert re.search(expected, line), line
    assert not (tmp_path / "run").exists()  # nothing was started


@pytest.mark.unit
@pytest.mark.fault("bad-fields")
def test_a_missing_config_file_is_named(tmp_path, capsys):
    line = one_line_error(capsys, ["train", "--out", str(tmp_path), "--config", str(tmp_path / "nope.yaml")])
    assert "config file" in line and "nope.yaml' does not exist" in line


# -- checkpoints, through every command that reads one ------------------------------------------------
@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    """A finished tiny run (a model folder with training checkpoints) and a few bad checkpoint files."""
    root = tmp_path_factory.mktemp("sources")
    Trainer(tiny_config(root / "run", schedule={"steps": 3})).fit()
    latest = root / "run" / "checkpoints" / "step-00000003.pt"
    data = latest.read_bytes()
    (root / "truncated.pt").write_bytes(data[: len(data) // 3])
    torch.save({"patch_embed.proj.weight": torch.zeros(1), "payload": MarkerPayload(root / "pwned")}, root / "code.pth")
    other = create_untrained(ViTConfig(image_size=8, patch_size=4, dim=48, depth=1, num_heads=2, mlp_dim=128))
    other.save_pretrained(root / "wide")
    shutil.copy(root / "wide" / "model.safetensors", root / "run" / "model.safetensors")  # dim 48; config: 32
    Image.new("RGB", (8, 8), (200, 10, 10)).save(root / "red.png")
    return root


def _resume_with(sources: Path, tmp_path: Path, bad: str) -> list[str]:
    """`train --resume` of a copy of the run whose latest checkpoint is replaced by the file `bad`."""
    run = tmp_path / "run"
    shutil.copytree(sources / "run", run)
    shutil.copy(sources / bad, run / "checkpoints" / "step-00000003.pt")
    record_checksums(run / "checkpoints" / "step-00000003.pt")  # as if written so: the checks after the checksum's
    return ["train", *TINY_FLAGS, "--steps", "3", "--out", str(run), "--resume"]


@pytest.mark.integration
@pytest.mark.fault("pickles")
@pytest.mark.parametrize("command", ["train --resume", "finetune --init", "eval --ckpt", "predict --ckpt"])
@pytest.mark.parametrize(
    "bad, expected",
    [
        ("truncated.pt", "not a readable PyTorch checkpoint"),
        ("code.pth", r"refused to unpickle: it names io\.open, which could run code"),
    ],
)
def test_bad_checkpoint_files_are_refused_by_every_command(sources, tmp_path, capsys, command, bad, expected):
    if command == "train --resume":
        argv = _resume_with(sources, tmp_path, bad)
        named = "step-00000003.pt"
    else:
        named = bad
        argv = {
            "finetune --init": ["finetune", "--data", "digits", "--out", str(tmp_path / "ft"), "--init"],
            "eval --ckpt": ["eval", "--data", "digits", "--ckpt"],
            "predict --ckpt": ["predict", str(sources / "red.png"), "--ckpt"],
        }[command] + [str(sources / bad)]
    line = one_line_error(capsys, argv)
    assert named in line and re.search(expected, line), line
    assert not (sources / "pwned").exists()  # the pickled code never ran


@pytest.mark.integration
@pytest.mark.fault("bad-checkpoint")
@pytest.mark.parametrize(
    "command, expected",
    [
        ("train --resume", r"--resume: .* was trained with other settings \(model\.dim: checkpoint None, now 48\)"),
        ("finetune --init", r"model\.dim cannot change the architecture of model\.init="),
        (
            "eval --ckpt",
            r"run/model\.safetensors: checkpoint does not fit the model; shape mismatches: blocks\.0\.attn\.proj\.bias",
        ),
        ("predict --ckpt", r"run/model\.safetensors: checkpoint does not fit the model; shape mismatches"),
    ],
)
def test_checkpoints_of_another_architecture_are_refused(sources, tmp_path, capsys, command, expected):
    argv = {
        "train --resume": [
            "train",
            *TINY_FLAGS,
            "--steps",
            "3",
            "--out",
            str(sources / "run"),
            "--resume",
            "--set",
            "model.dim=48",
        ],
        "finetune --init": [
            "finetune",
            "--data",
            "digits",
            "--out",
            str(tmp_path / "ft"),
            "--init",
            str(sources / "wide"),
            "--set",
            "model.dim=64",
        ],
        "eval --ckpt": ["eval", "--data", "digits", "--ckpt", str(sources / "run")],
        "predict --ckpt": ["predict", str(sources / "red.png"), "--ckpt", str(sources / "run")],
    }[command]
    line = one_line_error(capsys, argv)
    assert re.search(expected, line), line


# -- property-based: config values ----------------------------------------------------------------------
KEYS = [f"{section}.{f.name}" for section, cls in SECTIONS.items() for f in dataclasses.fields(cls)]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["cosine", "adamw", "fp32", "1e-3", "+7", "-0", "\u00b2", "\u0663", "token"]),
)
NUMERALS = st.text(st.characters(categories=("Nd", "No", "Nl")), min_size=1, max_size=3)  # "12", "²", "٣"
VALUES = st.one_of(
    NUMERALS, SCALARS, st.lists(SCALARS, max_size=4), st.dictionaries(st.text(max_size=5), SCALARS, max_size=2)
)


@pytest.mark.integration
@pytest.mark.fault("bad-fields")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(KEYS), VALUES)
def test_any_value_for_any_key_validates_or_raises_config_error(key, value):
    config = get_recipe("demo")  # valid: whatever fails below, the value did
    try:
        set_value(config, key, value, "--set")
        config.validate()
    except ConfigError as error:
        assert "\n" not in str(error) and key in str(error)
    else:  # accepted: the field now holds a value of its declared type
        section, _, name = key.partition(".")
        stored = getattr(getattr(config, section), name)
        assert coerce(stored, typing.get_type_hints(SECTIONS[section])[name], key) == stored


@pytest.mark.unit
@pytest.mark.fault("bad-fields")
@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_set_text_parses_or_raises_config_error(text):
    try:
        key, value = parse_assignment(text)
        set_value(get_recipe("demo"), key, value, f"--set {text}")
    except ConfigError as error:
        assert "\n" not in str(error).replace(text, "")  # one line, apart from what the user typed


@pytest.mark.unit
@pytest.mark.fault("bad-fields")
@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        VALUES,
        st.dictionaries(
            st.sampled_from([*SECTIONS, "recipe", "nope"]),
            st.one_of(VALUES, st.dictionaries(st.text(max_size=12), VALUES)),
        ),
    )
)
def test_any_yaml_document_applies_or_raises_config_error_naming_the_file(document):
    try:
        apply_mapping(get_recipe("demo"), document, "cfg.yaml")
    except ConfigError as error:
        assert str(error).startswith("cfg.yaml: ")


@pytest.mark.integration
@pytest.mark.fault("exits")
def test_a_reader_that_leaves_early_ends_the_command_quietly():
    import os
    import subprocess
    import sys

    # `vitlab models | head -0`: the reader is gone before the first line (the command takes a second to start,
    # the pipe is closed at once), so every line meets the closed end whatever the machine's speed; no traceback,
    # the status a shell reports. Unbuffered, so that the first line is written as it is printed.
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "vitlab", "models"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    error = process.stderr.read()
    assert process.wait(timeout=120) == 141, error
    assert "Traceback" not in error
