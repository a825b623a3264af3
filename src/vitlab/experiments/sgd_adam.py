"""`sgd-adam`: a BiT ResNet pre-trained with SGD and with Adam, then each fine-tuned alike (paper
Appendix D.1, Table 7).

The paper pre-trained ResNets with Adam, unusual for ResNets, and showed why: BiT-R50x1 and R152x2
pre-trained on JFT with each optimiser and fine-tuned; "Adam pre-training outperforms SGD
pre-training on most datasets and on average." Here the experiments' small BiT ResNet is pre-trained
on FractalDB (as `pretrain-transfer`, the same DIR/fractaldb; --pretrain-data names another source)
for --pretrain-steps steps with each optimiser, then fine-tuned on the data for --budget-steps steps
with one fine-tuning recipe, once per seed (the seed of both runs).

Pre-training, all else the `demo` recipe's (batch, augmentation, warm-up):
- Adam: the paper's (Sec. 4.1, Table 3's BiT-R50x1 JFT row): beta1 0.9, beta2 0.999, learning rate
  1e-3, weight decay 0.1 decoupled from the gradient (optim.name adamw: the reference code's Adam),
  linear decay, no gradient clipping (Table 3's caption clips on ImageNet only).
- SGD: "the hyperparameters recommended by Kolesnikov et al. (2020)" (Appendix D.1), BiT's upstream
  recipe (its Sec. 3.3): momentum 0.9, learning rate 0.03, weight decay 1e-4 (added to the gradient),
  the same schedule and no clipping.
Neither learning rate is rescaled to the demo's batch: Adam's 1e-3 is Table 3's at batch 4096, and
BiT's 0.03 is its rate per 256 images (BiT multiplies it by batch/256, which would give 0.0075 at
batch 64); both are used as the tables print them.
Fine-tuning (the paper's, Table 4's caption): SGD momentum 0.9, no weight decay, clipping at global
norm 1, cosine decay, learning rate 0.03 (vit_jax's base_lr, in Table 4's grids), a fresh
zero-initialised head.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

from vitlab.training import get_recipe
from vitlab.training.config import ModelSpec, OptimSpec, TrainConfig
from vitlab.training.paper_recipes import VIT_JAX_BASE_LR
from vitlab.training.paper_tables import (
    TABLE_4_DECAY,
    TABLE_4_GRAD_CLIP,
    TABLE_4_WEIGHT_DECAY,
    PretrainRow,
    pretrain_row,
)

from .pretrain_transfer import fractaldb
from .runner import Experiment, Results, Settings, bit_config, describe_model, fit_run, plot_bars, seeds_of, steps_of
from .wording import compare

PRETRAIN_STEPS = 150


def _adam_row() -> PretrainRow:
    row = pretrain_row("BiT-R50x1", "jft")  # Table 3: lr 1e-3, weight decay 0.1, linear decay
    assert row is not None  # Table 3 has the row
    return row


ADAM_ROW = _adam_row()
OPTIMISERS = {
    "Adam": OptimSpec(
        name="adamw", lr=ADAM_ROW.lr, weight_decay=ADAM_ROW.weight_decay, betas=(0.9, 0.999), grad_clip=None
    ),
    "SGD": OptimSpec(name="sgd", lr=0.03, momentum=0.9, weight_decay=1e-4, grad_clip=None),  # BiT upstream
}
# Table 7 as the ICLR 2021 text prints it (fine-tuned top-1 %, pre-trained on JFT for 7 epochs): dataset -> (R50 Adam, R50 SGD,
# R152x2 Adam, R152x2 SGD).
TABLE_7: dict[str, tuple[float, float, float, float]] = {
    "ImageNet": (77.54, 78.24, 84.97, 84.37),
    "CIFAR10": (97.67, 97.46, 99.06, 99.07),
    "CIFAR100": (86.07, 85.17, 92.05, 91.06),
    "Oxford-IIIT Pets": (91.11, 91.00, 95.37, 94.79),
    "Oxford Flowers-102": (94.26, 92.06, 98.62, 99.32),
    "Average": (89.33, 88.79, 94.01, 93.72),
}


def pretrain_config(settings: Settings, optimiser: str, source: str, steps: int) -> TrainConfig:
    config = get_recipe("demo")
    config.recipe = f"experiment:sgd-adam:pretrain-{optimiser}"
    config.model = ModelSpec(image_size=settings.image_size)
    config.data.source = source
    config.optim = replace(OPTIMISERS[optimiser])  # a copy: the run may change its own
    config.schedule.steps, config.schedule.warmup_steps = steps, max(steps // 10, 1)
    config.schedule.decay = ADAM_ROW.decay  # both optimisers: Table 3's schedule for the row
    return config


def finetune_config(settings: Settings, init: str, steps: int) -> TrainConfig:
    config = get_recipe("demo")
    config.recipe = "experiment:sgd-adam:finetune"
    config.model = ModelSpec(image_size=settings.image_size, init=init)
    config.data.source = settings.data
    config.optim = OptimSpec(
        name="sgd", lr=VIT_JAX_BASE_LR, momentum=0.9, weight_decay=TABLE_4_WEIGHT_DECAY, grad_clip=TABLE_4_GRAD_CLIP
    )
    config.schedule.steps, config.schedule.warmup_steps = steps, max(steps // 10, 1)
    config.schedule.decay = TABLE_4_DECAY
    return config


def run(settings: Settings) -> Results:
    steps, seeds = steps_of(settings, EXPERIMENT), seeds_of(settings, EXPERIMENT)
    pretrain_steps = settings.pretrain_steps or PRETRAIN_STEPS
    architecture = bit_config(settings)
    source, pretraining = fractaldb(settings)
    pretraining["steps"] = pretrain_steps
    rows = []
    for seed in seeds:
        for optimiser in OPTIMISERS:
            pretrained = fit_run(
                settings,
                f"sgd-adam-pretrain-{optimiser}-seed{seed}",
                pretrain_config(settings, optimiser, source, pretrain_steps),
                seed=seed,
                steps=pretrain_steps,
                architecture=architecture,
            )
            finetuned = fit_run(
                settings,
                f"sgd-adam-finetune-{optimiser}-seed{seed}",
                finetune_config(settings, str(pretrained.out), steps),
                seed=seed,
                steps=steps,
            )
            rows.append(
                {
                    "optimiser": optimiser,
                    "paper_average": TABLE_7["Average"][0 if optimiser == "Adam" else 1],  # R50x1's
                    "seed": seed,
                    "pretrain_top1": pretrained.summary["val_top1"],
                    "val_top1": finetuned.summary["val_top1"],
                }
            )
    results = Results(
        rows,
        group_by=("optimiser", "paper_average"),
        metrics=("pretrain_top1", "val_top1"),
        models={"BiT": describe_model(architecture)},
        extra={"pretraining": pretraining, "table_7": TABLE_7},
    )
    results.findings = findings(results.summary(), steps, pretrain_steps)
    return results


def findings(summary: list[dict[str, Any]], steps: int, pretrain_steps: int) -> list[str]:
    score = {e["optimiser"]: e for e in summary}
    adam, sgd = score["Adam"], score["SGD"]
    gap = adam["val_top1"] - sgd["val_top1"]
    spread = max(adam["val_top1_std"], sgd["val_top1_std"])
    paper_adam, paper_sgd = TABLE_7["Average"][:2]
    better = sum(row[0] > row[1] for name, row in TABLE_7.items() if name != "Average")
    verdict = {"above": "as in the paper", "below": "against the paper", "tied with": "a tie, not the paper's gain"}
    word = compare(adam["val_top1"], sgd["val_top1"])
    return [
        f"After {pretrain_steps} pre-training and {steps} fine-tuning steps, Adam pre-training fine-tunes to "
        f"{100 * adam['val_top1']:.1f}%, {word} SGD's {100 * sgd['val_top1']:.1f}% ({100 * gap:+.1f} points"
        + (", within the spread over seeds" if abs(gap) <= spread else "")
        + f"): {verdict[word]}.",
        f"The paper (Table 7, BiT-R50x1 pre-trained on JFT): Adam {paper_adam:.2f}% vs SGD {paper_sgd:.2f}% "
        f"averaged over five datasets, Adam better on {better} of 5.",
        f"Pre-training top-1 on its own held-out split: Adam {100 * adam['pretrain_top1']:.1f}%, "
        f"SGD {100 * sgd['pretrain_top1']:.1f}%.",
    ]


EXPERIMENT = Experiment(
    name="sgd-adam",
    reproduces="Table 7 (BiT ResNet pre-trained with SGD vs Adam, then fine-tuned)",
    question="Does a ResNet pre-trained with Adam fine-tune better than one pre-trained with SGD?",
    steps=100,  # fine-tuning steps
    seeds=(0, 1),
    run=run,
    columns=("optimiser", "pretrain_top1", "val_top1", "paper_average"),
    plot=partial(
        plot_bars,
        bars="optimiser",
        xlabel="pre-training optimiser (BiT ResNet)",
        ylabel="val top-1 after fine-tuning (%)",
    ),
    options=("pretrain_data", "pretrain_steps", "fractal_classes", "fractal_per_class", "fractal_size"),
)
