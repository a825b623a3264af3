"""The run configuration: one typed dataclass per part of a run, grouped in TrainConfig.

A recipe (recipes.py) builds a TrainConfig; a YAML file (`--config`) and single fields
(`--set optim.lr=0.01`) change it; the resolved result is written to DIR/run.yaml, which `--config`
reads back to repeat the run. Every value is checked against its field's type and range, and a
bad one is reported in one line naming the key, the value and where it came from.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vitlab import textfiles
from vitlab.config_fields import (
    STD_RULE,
    ConfigError,
    apply_mapping,
    as_sections,
    finite_checks,
    lookup,
    plain,
    sections,
    std_ok,
)
from vitlab.config_options import range_checks
from vitlab.data.augmentation import AugmentSpec

from .options import (
    DataSpec,
    ModelSpec,
    ObjectiveSpec,
    OptimSpec,
    RunSpec,
    ScheduleSpec,
)


@dataclass
class TrainConfig:
    recipe: str = "custom"
    model: ModelSpec = field(default_factory=ModelSpec)
    data: DataSpec = field(default_factory=DataSpec)
    augment: AugmentSpec = field(default_factory=AugmentSpec)
    optim: OptimSpec = field(default_factory=OptimSpec)
    schedule: ScheduleSpec = field(default_factory=ScheduleSpec)
    run: RunSpec = field(default_factory=RunSpec)
    objective: ObjectiveSpec = field(default_factory=ObjectiveSpec)

    # How vitlab.config_fields sets keys. Setting one of a pair to a value clears the other: --steps
    # replaces a recipe's epochs. A warm-up of 0 means none and leaves the other warm-up alone; a length
    # of 0 still clears the other length, so that its own range check names the flag.
    EXCLUSIVE: typing.ClassVar[dict[str, str]] = {
        "schedule.steps": "schedule.epochs",
        "schedule.epochs": "schedule.steps",
        "schedule.warmup_steps": "schedule.warmup_epochs",
        "schedule.warmup_epochs": "schedule.warmup_steps",
    }
    ZERO_MEANS_UNSET: typing.ClassVar[frozenset[str]] = frozenset({"schedule.warmup_steps", "schedule.warmup_epochs"})
    SET_ELSEWHERE: typing.ClassVar[dict[str, str]] = {
        "recipe": "the recipe is chosen with --recipe or a top-level 'recipe:' key"
    }

    def validate(self, origins: Mapping[str, str] | None = None) -> TrainConfig:
        """Raise ConfigError naming the first out-of-range value (and, from `origins`, the file or
        flag that set it); returns self."""
        for key, ok, requirement in [*finite_checks(self), *range_checks(self), *_checks_across_fields(self)]:
            if not ok:
                where = f"{origins[key]}: " if origins and key in origins else ""
                raise ConfigError(f"{where}{key}={plain(lookup(self, key))!r}: {requirement}")
        return self

    @property
    def micro_batch_size(self) -> int:
        return self.data.batch_size // self.optim.grad_accum

    @property
    def evaluation_batch_size(self) -> int:
        """data.eval_batch_size, else twice the micro-batch (no gradients to keep)."""
        return self.data.eval_batch_size or 2 * self.micro_batch_size

    def to_dict(self) -> dict[str, Any]:
        return plain(dataclasses.asdict(self))

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


SECTIONS: dict[str, type] = sections(TrainConfig)


def _checks_across_fields(config: TrainConfig) -> list[tuple[str, bool, str]]:
    """What no single field's declared range says: rules that read several fields, or a tuple's parts."""
    d, a, o, s = config.data, config.augment, config.optim, config.schedule
    return [
        *_objective_checks(config),
        ("data.source", bool(d.source.strip()), "must name a data source"),
        ("data.std", d.std is None or std_ok(d.std), STD_RULE),
        ("augment.crop_scale", 0.0 < a.crop_scale[0] <= a.crop_scale[1] <= 1.0, "must satisfy 0 < min <= max <= 1"),
        ("augment.crop_ratio", 0.0 < a.crop_ratio[0] <= a.crop_ratio[1], "must satisfy 0 < min <= max"),
        (
            "augment.randaugment",
            a.randaugment is None or (a.randaugment[0] > 0 and 0 <= a.randaugment[1] <= 30),
            "must be (ops > 0, magnitude in 0..30)",
        ),
        ("optim.betas", all(0.0 <= b < 1.0 for b in o.betas), "must both be in [0, 1)"),
        (
            "optim.grad_accum",
            o.grad_accum < 1 or d.batch_size % o.grad_accum == 0,  # (< 1 fails its range)
            f"must divide data.batch_size={d.batch_size} into equal micro-batches",
        ),
        (
            "optim.layer_decay",
            o.layer_decay is None or o.name != "tfa_adamw",
            "needs parameter groups; optim.name=tfa_adamw decays every variable alike",
        ),
        (
            "schedule.steps",
            (s.steps is None) != (s.epochs is None),
            "set exactly one of schedule.steps and schedule.epochs",
        ),
        (
            "schedule.warmup_steps",
            s.warmup_steps == 0 or s.warmup_epochs == 0.0,
            "set schedule.warmup_steps or schedule.warmup_epochs, not both",
        ),
    ]


def _objective_checks(config: TrainConfig) -> list[tuple[str, bool, str]]:
    """What masked patch prediction cannot combine with: label mixing and smoothing (it reads no
    labels), and the best-weights outputs, which rank by class accuracy and would save the mpp head."""
    if config.objective.name != "mpp":
        return []
    a, r = config.augment, config.run
    no_labels = "must be 0 with objective.name=mpp (masked patch prediction reads no labels)"
    best = "is not available with objective.name=mpp (it ranks and saves class-prediction models)"
    return [
        ("augment.mixup", a.mixup == 0.0, no_labels),
        ("augment.cutmix", a.cutmix == 0.0, no_labels),
        ("augment.label_smoothing", a.label_smoothing == 0.0, no_labels),
        ("run.keep_best", not r.keep_best, best),
        ("run.keep_best_by", r.keep_best_by is None, best),
        ("run.early_stop_patience", r.early_stop_patience is None, best),
        (
            "run.compile",
            not r.compile,
            "is not applied to the masked-patch forward; leave it off with objective.name=mpp",
        ),
    ]


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML file of config sections (`--config`, a run.yaml), bounded and without aliases (textfiles.py)."""
    return as_sections(textfiles.read_config(path), str(path))


def read_run_config(path: str | Path) -> TrainConfig:
    """The resolved config a run wrote to DIR/run.yaml (it holds every field)."""
    document = read_yaml(path)
    config = apply_mapping(TrainConfig(), document, str(path))
    config.recipe = str(document.get("recipe", config.recipe))
    return config
