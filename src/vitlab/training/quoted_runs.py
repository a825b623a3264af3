"""Published fine-tuning results that `paper-finetune` quotes, each with the settings it was reached with.

A recipe's docstring quotes a number only with that run's settings; the settings below are read from
the source named with each run, and tests/training/test_paper_tables.py checks that the recipe gives them.
Their warm-up is also what a run of that length on that row takes (recipes.warmup_for_length).
"""

from __future__ import annotations

from dataclasses import dataclass

# google-research/vision_transformer, README.md: the table "replicated using the models from
# gs://vit_models/imagenet21k" (2021; settings: vit_jax/configs/common.py, models.py, vit.py), and the
# shorter schedules' table (2020; settings: vit_jax/flags.py and configs.py of that commit).
VIT_JAX_2021 = "vit_jax README, models from gs://vit_models/imagenet21k, dropout=0.0 column"
VIT_JAX_SHORT = "vit_jax README, shorter training schedules (total_steps / warmup_steps)"


@dataclass(frozen=True)
class QuotedRun:
    source: str
    model: str  # vitlab's name of the fine-tuned model, pre-trained on ImageNet-21k
    row: str  # the paper-finetune row (Table 4's dataset)
    lr: float
    steps: int
    warmup_steps: int
    dropout: float
    top1: float  # percent, on the row's test split


QUOTED_RUNS: tuple[QuotedRun, ...] = (
    # configs/vit.py `if model == 'b16' and dataset == 'cifar10': config.base_lr = 0.01`; common.py
    # total_steps 10_000, warmup_steps 500; models.py get_b16_config dropout_rate 0.0.
    QuotedRun(VIT_JAX_2021, "B/16", "cifar10", 0.01, 10_000, 500, 0.0, 99.02),
    QuotedRun(VIT_JAX_2021, "B/16", "cifar100", 0.03, 10_000, 500, 0.0, 92.06),
    # flags.py then: --base_lr default 0.03; configs.py get_b16_config dropout_rate 0.1.
    QuotedRun(VIT_JAX_SHORT, "B/16", "cifar10", 0.03, 500, 50, 0.1, 98.59),
    QuotedRun(VIT_JAX_SHORT, "B/16", "cifar10", 0.03, 1_000, 100, 0.1, 98.86),
    QuotedRun(VIT_JAX_SHORT, "B/16", "cifar100", 0.03, 500, 50, 0.1, 89.17),
    QuotedRun(VIT_JAX_SHORT, "B/16", "cifar100", 0.03, 1_000, 100, 0.1, 91.15),
)

# Base learning rates vit_jax sets for one model on one dataset (configs/vit.py); others: base_lr 0.03.
VIT_JAX_MODEL_LRS: dict[tuple[str, str], float] = {("B/16", "cifar10"): 0.01}


def quoted_warmup(row: str, steps: int) -> int | None:
    """The warm-up a quoted run of `steps` steps on `row` states, or None."""
    stated = {run.warmup_steps for run in QUOTED_RUNS if run.row == row and run.steps == steps}
    assert len(stated) <= 1, (row, steps, stated)  # the table would contradict itself
    return stated.pop() if stated else None
