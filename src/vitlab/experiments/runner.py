"""What every experiment shares: its settings, the models it compares, and one training run.

Budgets are optimiser steps, so a result does not depend on the machine. Every run is an ordinary
Trainer run in DIR/runs/TAG (model folder, metrics, run.yaml), all with the same recipe: the
`demo` recipe's AdamW, warm-up + cosine schedule, mild crop and label smoothing, with the step
budget of the experiment. A run folder that already holds a finished or interrupted run of the
same settings is resumed, so an experiment stopped part-way continues where it stopped.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes

from vitlab.bench.flops import model_flops
from vitlab.model import BiTConfig, ResNetConfig, ViTConfig, config_for, create_untrained
from vitlab.model.axial import AxialConfig
from vitlab.model.bit import bit_resnet_config
from vitlab.training import Trainer, TrainResult, get_recipe
from vitlab.training.checkpoint import holds_checkpoints
from vitlab.training.config import ModelSpec, TrainConfig
from vitlab.training.paper_tables import TABLE_4

log = logging.getLogger("vitlab")

RUNS = "runs"
COMMON = ("budget_steps", "seeds", "image_size", "threads")  # Settings every experiment reads


@dataclass
class Settings:
    """One invocation of an experiment; None means the experiment's default."""

    data: str = "digits"
    out: Path = Path("experiments")
    budget_steps: int | None = None  # optimiser steps of every training run on `data`
    seeds: tuple[int, ...] | None = None
    image_size: int = 16  # pixels; 16 suits `digits` (8 px upsampled), 32 suits CIFAR
    threads: int = 1  # torch threads per run: one is as fast as two for these small models
    fractions: tuple[float, ...] | None = None  # data-scaling
    lrs: tuple[float, ...] | None = None  # pooling, lr-sweep (default there: Table 4's grid for the row)
    row: str = "pets"  # lr-sweep: the Table 4 row whose steps, LR grid and dev fraction it uses
    init: str | None = None  # lr-sweep: the checkpoint to fine-tune; None trains the experiments' ViT from scratch
    pretrain_data: str | None = None  # pretrain-transfer; None: FractalDB generated into DIR/fractaldb
    pretrain_steps: int | None = None
    fractal_classes: int = 100
    fractal_per_class: int = 100
    fractal_size: int = 32
    label_fraction: float | None = None  # self-supervision: the share of labelled images fine-tuned on
    sizes: tuple[str, ...] | None = None  # axial: WIDTHxDEPTH of each ViT / Axial-ViT pair, e.g. 64x4
    models: tuple[str, ...] | None = None  # compute-cost: registry names (`vitlab models`)
    input_sizes: tuple[int, ...] | None = None  # compute-cost: input sizes in pixels
    memory_budget_mib: float = 128.0  # compute-cost: the memory the largest batch must fit (compute_cost.py)
    rounds: int = 3  # compute-cost: timed rounds (the median is reported)

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        positive = "must be positive"
        checks = [
            ("--budget-steps", self.budget_steps is None or self.budget_steps > 0, positive),
            ("--pretrain-steps", self.pretrain_steps is None or self.pretrain_steps > 0, positive),
            ("--image-size", self.image_size > 0, positive),
            ("--threads", self.threads > 0, positive),
            ("--seeds", self.seeds is None or len(self.seeds) > 0, "must name at least one seed"),
            (
                "--fractions",
                self.fractions is None or (self.fractions and all(0 < f <= 1 for f in self.fractions)),
                "must be in (0, 1]",
            ),
            ("--lrs", self.lrs is None or (self.lrs and all(lr > 0 for lr in self.lrs)), positive),
            ("--fractal-classes", self.fractal_classes > 1, "must be at least 2"),
            ("--fractal-per-class", self.fractal_per_class > 0, positive),
            ("--fractal-size", self.fractal_size > 0, positive),
            (
                "--label-fraction",
                self.label_fraction is None or 0 < self.label_fraction <= 1,
                "must be in (0, 1]",
            ),
            (
                "--input-sizes",
                self.input_sizes is None or (self.input_sizes and all(size > 0 for size in self.input_sizes)),
                positive,
            ),
            ("--memory-budget-mib", self.memory_budget_mib > 0, positive),
            ("--rounds", self.rounds > 0, positive),
            ("--row", self.row in TABLE_4, f"must be a Table 4 row: {', '.join(TABLE_4)}"),
            (
                "--sizes",
                self.sizes is None or (self.sizes and all(re.fullmatch(r"[1-9]\d*x[1-9]\d*", s) for s in self.sizes)),
                "must be WIDTHxDEPTH, e.g. 64x4",
            ),
        ]
        for option, ok, requirement in checks:
            if not ok:
                value = getattr(self, option[2:].replace("-", "_"))
                raise ValueError(
                    f"{option} {' '.join(map(str, value)) if isinstance(value, tuple) else value}: {requirement}"
                )

    def command(self, experiment: Experiment) -> str:
        """The `vitlab experiment` command line that repeats this run (options it ignores left out)."""
        parts = ["vitlab experiment", experiment.name, "--data", self.data, "--out", str(self.out)]
        defaults = Settings()
        for item in fields(self):
            value = getattr(self, item.name)
            if (
                item.name in ("data", "out")
                or value is None
                or value == getattr(defaults, item.name)
                or (item.name not in COMMON and item.name not in experiment.options)
            ):
                continue
            option = "--" + item.name.replace("_", "-")
            parts += [option, *map(str, value)] if isinstance(value, tuple) else [option, str(value)]
        return " ".join(parts)


@dataclass(frozen=True)
class Experiment:
    """An experiment module's declaration: what it reproduces, its default budget, how to report it."""

    name: str
    reproduces: str  # the paper's figure or table
    question: str
    steps: int  # default optimiser steps per run on the data
    seeds: tuple[int, ...]
    run: Callable[[Settings], Results]
    columns: tuple[str, ...]  # of the Markdown table, from Results.summary()
    plot: Callable[[Axes, list[dict[str, Any]]], None]
    options: tuple[str, ...] = ()  # Settings fields it reads besides COMMON
    panels: tuple[Callable[[Axes, list[dict[str, Any]]], None], ...] = ()  # more plots beside `plot`


@dataclass
class Results:
    """Per-run rows (one per configuration and seed) and what the report needs besides them."""

    rows: list[dict[str, Any]]
    group_by: tuple[str, ...]  # the columns that name a configuration
    metrics: tuple[str, ...]  # accuracies in [0, 1], averaged over seeds
    models: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> architecture, FLOPs, params
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. the pre-training run
    findings: list[str] = field(default_factory=list)  # one sentence each, from the numbers

    def summary(self) -> list[dict[str, Any]]:
        """One row per configuration, in first-seen order: each metric's mean and std over seeds."""
        groups: dict[tuple, list[dict[str, Any]]] = {}
        for row in self.rows:
            groups.setdefault(tuple(row[key] for key in self.group_by), []).append(row)
        summary = []
        for key, rows in groups.items():
            entry: dict[str, Any] = dict(zip(self.group_by, key))
            for metric in self.metrics:
                values = [row[metric] for row in rows]
                entry[metric], entry[f"{metric}_std"] = float(np.mean(values)), float(np.std(values))
            entry["seeds"] = [row["seed"] for row in rows]
            summary.append(entry)
        return summary


def plot_bars(axes: Axes, summary: list[dict[str, Any]], bars: str, xlabel: str, ylabel: str) -> None:
    """Val top-1 of each value of `bars` as a bar from zero, with its spread over seeds."""
    labels = [entry[bars] for entry in summary]
    axes.bar(
        labels,
        [100 * entry["val_top1"] for entry in summary],
        yerr=[100 * entry["val_top1_std"] for entry in summary],
        capsize=4,
        color=["tab:orange", "tab:blue"][: len(labels)],
    )
    axes.set_ylim(0, 100)  # bars start at zero
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)


def plot_lines(axes: Axes, summary: list[dict[str, Any]], series: str, x: str, xlabel: str) -> None:
    """Val top-1 against `x` on a log axis, one line with seed error bars per value of `series`."""
    for label in dict.fromkeys(entry[series] for entry in summary):
        entries = [entry for entry in summary if entry[series] == label]
        axes.errorbar(
            [e[x] for e in entries],
            [100 * e["val_top1"] for e in entries],
            yerr=[100 * e["val_top1_std"] for e in entries],
            marker="o",
            capsize=3,
            label=label,
        )
    axes.set_xscale("log")
    axes.set_xlabel(xlabel)
    axes.set_ylabel("val top-1 (%)")
    axes.legend()


# -- the compared models -------------------------------------------------------------------------
# Chosen so that the three families cost about the same per image (counted, not assumed: each
# report lists the forward FLOPs): at 16 px, ViT 15.6M, BiT 16.9M, hybrid 14.6M FLOPs.
VIT = dict(dim=96, depth=4, num_heads=4, mlp_dim=384)


def vit_config(settings: Settings, **changes: Any) -> ViTConfig:
    """The ViT of every experiment: patch 4, width 96, 4 layers (the `demo` recipe's model)."""
    config = config_for("Ti/4", image_size=settings.image_size, **VIT, **changes)
    assert isinstance(config, ViTConfig)  # "Ti/4" names a ViT
    return config.replace(name="ViT/4")


def bit_config(settings: Settings) -> BiTConfig:
    """A BiT ResNetV2 (pre-activation, GroupNorm, weight standardisation) of three stages of two units
    at root width 16, with the 3x3/1 stem for small images; 8 GroupNorm groups, as 32 need width 32."""
    resnet = bit_resnet_config(layers=(2, 2, 2), width=16, num_groups=8, stem="small")
    config = config_for("BiT-R26x1-small", resnet=resnet, image_size=settings.image_size)
    assert isinstance(config, BiTConfig)  # a "BiT-" name
    return config.replace(name="BiT-R20-w16-small")


def hybrid_config(settings: Settings) -> ViTConfig:
    """The hybrid (paper Sec. 3.1): a one-unit-per-stage ResNet of width 8 (stride 4), its feature
    map fed to a 3-layer ViT of the same width with patch size 1: as many tokens as ViT/4."""
    backbone = ResNetConfig(layers=(1, 1, 1), width=8, num_groups=8, stem="small")
    config = config_for("R20-small+Ti/4", backbone=backbone, image_size=settings.image_size, **{**VIT, "depth": 3})
    assert isinstance(config, ViTConfig)  # a hybrid is a ViT with a ResNet backbone
    return config.replace(name="R11-w8-small+ViT/1")


def describe_model(config: ViTConfig | BiTConfig) -> dict[str, Any]:
    """Architecture in words, forward FLOPs per image and parameter count, for the reports."""
    if isinstance(config, BiTConfig):
        r = config.resnet
        words = f"BiT ResNetV2, units {r.layers}, width {r.width}, stride {r.stride}"
    else:
        kind = "Axial-ViT" if isinstance(config, AxialConfig) else "ViT"
        words = f"{kind} /{config.patch_size}, D {config.dim}, {config.depth} layers, MLP {config.mlp_dim}"
        if config.backbone is not None:
            b = config.backbone
            words = f"ResNet units {b.layers}, width {b.width}, stride {b.stride} + " + words
    params = sum(p.numel() for p in create_untrained(config.replace(num_classes=10)).parameters())
    return {
        "architecture": words,
        "mflops": round(model_flops(config.replace(num_classes=10)) / 1e6, 2),
        "params": params,
        "name": config.name,
    }


# -- one training run ----------------------------------------------------------------------------
# Training seconds of every run since the last reset, as each run measured itself (a resumed run
# that had finished reports its original time): a report's wall time does not shrink on re-reporting.
TRAINING_SECONDS: list[float] = []


def train_run(
    settings: Settings,
    tag: str,
    *,
    seed: int,
    steps: int,
    architecture: ViTConfig | BiTConfig | None = None,
    init: str | Path | None = None,
    data: str | None = None,
    lr: float | None = None,
    train_fraction: float = 1.0,
) -> TrainResult:
    """Train `architecture` from scratch (or fine-tune `init`) on `data` for `steps` steps in DIR/runs/TAG."""
    config = get_recipe("demo")
    config.recipe = f"experiment:{tag}"
    config.model = ModelSpec(image_size=settings.image_size, init=str(init) if init is not None else None)
    config.data.source = data or settings.data
    config.data.train_fraction = train_fraction
    config.schedule.steps, config.schedule.warmup_steps = steps, max(steps // 10, 1)
    if lr is not None:
        config.optim.lr = lr
    return fit_run(settings, tag, config, seed=seed, steps=steps, architecture=architecture)


def fit_run(
    settings: Settings,
    tag: str,
    config: TrainConfig,
    *,
    seed: int,
    steps: int,
    architecture: ViTConfig | BiTConfig | None = None,
) -> TrainResult:
    """Fit `config` in DIR/runs/TAG (resuming what is there), evaluated and checkpointed once at the end."""
    out = settings.out / RUNS / tag
    config.run.out, config.run.seed, config.run.threads = str(out), seed, settings.threads
    config.run.eval_every, config.run.log_every, config.run.keep_ckpts = steps, steps, 1
    config.run.resume = holds_checkpoints(out)
    started = time.perf_counter()
    result = Trainer(config, architecture=architecture).fit()
    TRAINING_SECONDS.append(float(result.summary["wall_time_s"]))  # the report sums the runs' own times
    log.info(
        "%s: val top-1 %.4f after %d steps (%.0f s)",
        tag,
        result.summary["val_top1"],
        steps,
        time.perf_counter() - started,
    )
    return result


def summary_row(result: TrainResult, metrics: tuple[str, ...], **keys: Any) -> dict[str, Any]:
    """One results row: `keys`, then each of `metrics` from the run's summary, in that order (the CSV's columns)."""
    return {**keys, **{name: result.summary[name] for name in metrics}}


def seeds_of(settings: Settings, experiment: Experiment) -> tuple[int, ...]:
    return settings.seeds or experiment.seeds


def steps_of(settings: Settings, experiment: Experiment) -> int:
    return settings.budget_steps or experiment.steps
