"""The run config: recipe < YAML < flags < --set, run.yaml round trips, and one clear error per bad value."""

from __future__ import annotations

import pytest
import yaml

from vitlab.config_fields import apply_mapping, set_value
from vitlab.model import ConfigError
from vitlab.textfiles import parse_assignment
from vitlab.training import get_recipe
from vitlab.training.config import TrainConfig, read_yaml

pytestmark = pytest.mark.unit


def test_set_parses_values_as_yaml_and_checks_types():
    config = get_recipe("small-data")
    set_value(config, *parse_assignment("optim.lr=1e-3"), "--set")  # YAML 1.1 reads 1e-3 as a string
    set_value(config, *parse_assignment("augment.randaugment=[2, 15]"), "--set")
    set_value(config, *parse_assignment("optim.grad_clip=null"), "--set")
    set_value(config, *parse_assignment("model.image_size=[32, 48]"), "--set")
    assert config.optim.lr == 0.001 and isinstance(config.optim.lr, float)
    assert config.augment.randaugment == (2, 15)
    assert config.optim.grad_clip is None
    assert config.model.image_size == (32, 48)


def test_steps_replace_epochs_and_warmup_kinds_replace_each_other():
    config = get_recipe("small-data")
    assert config.schedule.epochs == 200 and config.schedule.steps is None
    set_value(config, "schedule.steps", 500, "--steps")
    set_value(config, "schedule.warmup_steps", 50, "--set")
    assert (config.schedule.steps, config.schedule.epochs) == (500, None)
    assert (config.schedule.warmup_steps, config.schedule.warmup_epochs) == (50, 0.0)
    config.validate()


def test_run_yaml_round_trips(tmp_path):
    config = get_recipe("keras-example")
    config.run.out = str(tmp_path)
    path = tmp_path / "run.yaml"
    path.write_text(config.to_yaml())
    document = read_yaml(path)
    again = apply_mapping(get_recipe(document["recipe"]), document, str(path))
    assert again == config
    assert again.to_dict() == yaml.safe_load(config.to_yaml())


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("optim.lrr", 0.1, "unknown key 'optim.lrr' (did you mean optim.lr?); optim has name, lr,"),
        ("lr", 0.1, "did you mean optim.lr?"),
        ("optimiser.lr", 0.1, "SECTION one of model, data, augment, optim, schedule, run"),
        ("optim.lr", "fast", "optim.lr: expected a number, got str 'fast'"),
        ("optim.grad_accum", 2.5, "optim.grad_accum: expected an integer, got 2.5"),
        ("run.resume", "yes", "run.resume: expected true/false, got str 'yes'"),
        ("optim.name", "lamb", "optim.name: expected one of 'sgd', 'adam', 'adamw', 'tfa_adamw', got str 'lamb'"),
        ("augment.crop_scale", [0.5], "augment.crop_scale: expected a list of 2 (a number, a number)"),
        (
            "model.pool",
            "mean",
            "model.pool: expected one of 'token', 'gap', 'flatten', 'max', 'avgmax' or null",
        ),
    ],
)
def test_bad_keys_and_types_name_the_culprit(key, value, message):
    with pytest.raises(ConfigError) as error:
        set_value(get_recipe("small-data"), key, value, "--set")
    assert message in str(error.value)
    assert str(error.value).startswith("--set: ")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("optim.lr", -0.1, "optim.lr=-0.1: must be > 0"),
        ("data.batch_size", 0, "data.batch_size=0: must be > 0"),
        ("optim.grad_accum", 3, "optim.grad_accum=3: must divide data.batch_size=128"),
        ("augment.label_smoothing", 1.0, "augment.label_smoothing=1.0: must be in [0, 1)"),
        ("optim.ema_decay", 1.0, "optim.ema_decay=1.0: must be in (0, 1) or null"),
        ("augment.crop_scale", [0.9, 0.5], "augment.crop_scale=[0.9, 0.5]: must satisfy 0 < min <= max <= 1"),
        ("schedule.epochs", None, "set exactly one of schedule.steps and schedule.epochs"),
        ("augment.reprob", 1.5, "augment.reprob=1.5: must be in [0, 1]"),
        ("augment.repeats", 0, "augment.repeats=0: must be >= 1"),
        ("model.trainable_blocks", -1, "model.trainable_blocks=-1: must be >= 0 or null"),
    ],
)
def test_out_of_range_values_name_the_key(key, value, message):
    config = get_recipe("small-data")
    set_value(config, key, value, "--set")
    with pytest.raises(ConfigError) as error:
        config.validate()
    assert message in str(error.value)


def test_yaml_file_errors_name_the_file(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("optim: {lr: [1, 2\n")
    with pytest.raises(ConfigError, match="broken.yaml: not valid YAML"):
        read_yaml(broken)
    flat = tmp_path / "flat.yaml"
    flat.write_text("optim: 0.1\n")
    with pytest.raises(ConfigError, match="flat.yaml: section 'optim' must be a mapping of fields"):
        apply_mapping(TrainConfig(), read_yaml(flat), str(flat))
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        read_yaml(tmp_path / "missing.yaml")


def test_assignment_without_equals_sign():
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_assignment("optim.lr")


@pytest.mark.parametrize(
    "name, message",
    [
        (
            "paper-train",
            r"unknown recipe 'paper-train' \(did you mean paper-pretrain or paper-finetune\?\); recipes: paper-pretrain",
        ),
        ("paper-finetune:mnist", "has no row 'mnist'; rows: imagenet, cifar100, cifar10, pets, flowers, vtab"),
        ("small-data:cifar10", "recipe 'small-data' has no dataset rows"),
    ],
)
def test_recipe_names(name, message):
    with pytest.raises(ConfigError, match=message):
        get_recipe(name)


def test_fine_tuning_flags_set_their_fields(capsys):
    from helpers import one_line_error
    from vitlab.cli import build_parser
    from vitlab.cli.train import build_config

    common = ["finetune", "--ckpt", "B/16", "--data", "digits", "--out", "x", "--steps", "3"]
    flags = ["--layer-decay", "0.65", "--trainable-blocks", "2", "--reprob", "0.25", "--repeats", "3"]
    config = build_config(build_parser().parse_args([*common, *flags]))
    assert (config.optim.layer_decay, config.model.trainable_blocks, config.augment.reprob, config.augment.repeats) == (
        0.65,
        2,
        0.25,
        3,
    )
    assert build_config(build_parser().parse_args(common)).optim.layer_decay is None  # off by default
    assert one_line_error(capsys, [*common, "--layer-decay", "0"]).endswith(
        "--layer-decay: optim.layer_decay=0.0: must be in (0, 1] or null"
    )
