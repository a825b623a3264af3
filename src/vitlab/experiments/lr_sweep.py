"""`lr-sweep`: the fine-tuning learning rate picked as the paper picks it (Appendix B.1.1, Table 4).

"We run a small grid search over learning rates, see learning rate ranges in Table 4. To do so, we use
small sub-splits from the training set (10% for Pets and Flowers, 2% for CIFAR, 1% ImageNet) as
development set and train on the remaining data. For final results we train on the entire training
set and evaluate on the respective test data."

Every run is the `paper-finetune:ROW` recipe (SGD, cosine, no weight decay, clipping at 1) with the
row's steps (or --budget-steps, warm-up scaled alike) and batch (capped at the training images). One
run per learning rate of the row's grid on the training set less a stratified dev split of the row's
fraction; the learning rate with the best mean dev top-1 (the smaller on a tie) then trains on the
whole training set, and the source's validation split is its test split. --ckpt fine-tunes a
checkpoint; without it the experiments' small ViT trains from scratch.
"""

from __future__ import annotations

import logging
import math
from functools import partial
from typing import Any

import numpy as np

from vitlab.training import TrainResult, get_recipe
from vitlab.training.config import ModelSpec
from vitlab.training.paper_tables import DEV_FRACTIONS, TABLE_4, TABLE_4_BATCH_SIZE

from .runner import (
    Experiment,
    Results,
    Settings,
    describe_model,
    fit_run,
    plot_lines,
    seeds_of,
    summary_row,
    vit_config,
)

log = logging.getLogger("vitlab")

DEV, TEST = "dev", "test"


def finetune_run(
    settings: Settings, tag: str, *, seed: int, lr: float, steps: int, batch_size: int, dev_fraction: float | None
) -> TrainResult:
    """One `paper-finetune:ROW` run at `lr` for `steps` in DIR/runs/TAG, on the training set less a dev split."""
    config = get_recipe(f"paper-finetune:{settings.row}", steps=steps)  # its warm-up scaled to the steps
    config.recipe = f"experiment:{tag}"
    config.optim.lr = lr  # any value: --lrs may leave the grid
    config.data.source, config.data.dev_fraction = settings.data, dev_fraction
    config.data.batch_size = batch_size
    architecture = None
    if settings.init is not None:
        config.model = ModelSpec(
            init=settings.init, image_size=settings.image_size, dropout=0.0, attn_dropout=0.0, drop_path=0.0
        )
    else:
        architecture = vit_config(settings)
    return fit_run(settings, tag, config, seed=seed, steps=steps, architecture=architecture)


def seed_runs(
    settings: Settings,
    split: str,
    lr: float,
    seeds: tuple[int, ...],
    *,
    steps: int,
    batch_size: int,
    dev_fraction: float | None,
) -> list[dict[str, Any]]:
    """One run per seed at `lr`: the dev runs (`sweep-` tags) or the final ones on the whole training set (`final-`)."""
    prefix = "sweep" if split == DEV else "final"
    rows = []
    for seed in seeds:
        tag = f"{prefix}-{settings.row}-lr{lr:g}-seed{seed}"
        result = finetune_run(
            settings, tag, seed=seed, lr=lr, steps=steps, batch_size=batch_size, dev_fraction=dev_fraction
        )
        rows.append(summary_row(result, ("val_top1", "train_images"), split=split, lr=lr, seed=seed))
    return rows


def batch_size_for(settings: Settings, dev_fraction: float | None) -> int:
    """Table 4's batch of 512, or the training images left beside the dev split where fewer (`digits`)."""
    from vitlab.data import load_datasets

    total = len(load_datasets(settings.data, None, None, check="none").train)
    available = total - (math.ceil(total * dev_fraction) if dev_fraction else 0)  # sklearn rounds the dev split up
    batch = min(TABLE_4_BATCH_SIZE, available)
    if batch < TABLE_4_BATCH_SIZE:
        log.info(
            "lr-sweep: %d training images beside the dev split; batch %d instead of %d",
            available,
            batch,
            TABLE_4_BATCH_SIZE,
        )
    return batch


def run(settings: Settings) -> Results:
    row = TABLE_4[settings.row]
    settings.budget_steps = settings.budget_steps or row.steps  # Table 4's steps unless a budget is given
    steps, grid = settings.budget_steps, settings.lrs or row.lrs
    dev_fraction = DEV_FRACTIONS.get(settings.row)
    seeds = seeds_of(settings, EXPERIMENT)
    rows: list[dict[str, Any]] = []
    batch = batch_size_for(settings, dev_fraction)
    if len(grid) > 1:
        if dev_fraction is None:
            raise ValueError(
                f"--row {settings.row}: the paper gives it one learning rate and no dev split; pass one --lrs value"
            )
        for lr in grid:
            rows += seed_runs(settings, DEV, lr, seeds, steps=steps, batch_size=batch, dev_fraction=dev_fraction)
    dev_means = {lr: float(np.mean([r["val_top1"] for r in rows if r["lr"] == lr])) for lr in grid} if rows else {}
    best = max(grid, key=lambda lr: (dev_means.get(lr, 0.0), -lr))
    rows += seed_runs(settings, TEST, best, seeds, steps=steps, batch_size=batch, dev_fraction=None)
    models = {} if settings.init else {"ViT": describe_model(vit_config(settings))}
    results = Results(
        rows,
        group_by=("split", "lr", "train_images"),
        metrics=("val_top1",),
        models=models,
        extra={"row": settings.row, "grid": list(grid), "dev_fraction": dev_fraction, "picked_lr": best},
    )
    results.findings = findings(results.summary(), settings.row, dev_fraction, best)
    return results


def findings(summary: list[dict[str, Any]], row: str, dev_fraction: float | None, best: float) -> list[str]:
    test = next(e for e in summary if e["split"] == TEST)
    lines = []
    if dev_fraction is not None and any(e["split"] == DEV for e in summary):
        dev = {e["lr"]: e["val_top1"] for e in summary if e["split"] == DEV}
        shown = ", ".join(f"{lr:g}: {100 * top1:.1f}%" for lr, top1 in dev.items())
        lines.append(
            f"Dev split ({100 * dev_fraction:g}% of the training set, Table 4 row {row}): {shown}; picked lr {best:g}."
        )
    lines.append(f"Trained on the whole training set at lr {best:g}: test top-1 {100 * test['val_top1']:.1f}%.")
    return lines


EXPERIMENT = Experiment(
    name="lr-sweep",
    reproduces="Appendix B.1.1 and Table 4 (fine-tuning learning rate picked on a dev split)",
    question="Which of Table 4's learning rates does a dev split of the training set pick, and what does it "
    "reach on the test split when trained on the whole training set?",
    steps=TABLE_4["pets"].steps,
    seeds=(0,),
    run=run,
    columns=("split", "lr", "train_images", "val_top1"),
    plot=partial(plot_lines, series="split", x="lr", xlabel="base learning rate (SGD)"),
    options=("lrs", "row", "init"),
)
