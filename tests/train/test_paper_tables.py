"""Every paper recipe against the paper's Tables 3 and 4 and their captions, typed here from the paper
(arXiv 2010.11929, Appendix B.1 and B.1.1) in the paper's own names, independently of the code's table."""

from __future__ import annotations

import logging
import re

import pytest
import torch

from vitlab.model import ConfigError, create_untrained
from vitlab.train import get_recipe
from vitlab.train.optim import build_optimizer, build_schedule
from vitlab.train.paper_tables import TABLE_3, TABLE_4
from vitlab.train.recipes import finetune_lr_grid

pytestmark = pytest.mark.unit

# Table 3: Models | Dataset | Epochs | Base LR | LR decay | Weight decay | Dropout
PAPER_TABLE_3 = [
    ("ViT-B/{16,32}", "JFT-300M", "7", 8e-4, "linear", 0.1, 0.0),
    ("ViT-L/32", "JFT-300M", "7", 6e-4, "linear", 0.1, 0.0),
    ("ViT-L/16", "JFT-300M", "7/14", 4e-4, "linear", 0.1, 0.0),
    ("ViT-H/14", "JFT-300M", "14", 3e-4, "linear", 0.1, 0.0),
    ("R50x{1,2}", "JFT-300M", "7", 1e-3, "linear", 0.1, 0.0),
    ("R101x1", "JFT-300M", "7", 8e-4, "linear", 0.1, 0.0),
    ("R152x{1,2}", "JFT-300M", "7", 6e-4, "linear", 0.1, 0.0),
    ("R50+ViT-B/{16,32}", "JFT-300M", "7", 8e-4, "linear", 0.1, 0.0),
    ("R50+ViT-L/32", "JFT-300M", "7", 2e-4, "linear", 0.1, 0.0),
    ("R50+ViT-L/16", "JFT-300M", "7/14", 4e-4, "linear", 0.1, 0.0),
    ("ViT-B/{16,32}", "ImageNet-21k", "90", 1e-3, "linear", 0.03, 0.1),
    ("ViT-L/{16,32}", "ImageNet-21k", "30/90", 1e-3, "linear", 0.03, 0.1),
    ("ViT-*", "ImageNet", "300", 3e-3, "cosine", 0.3, 0.1),
]
# Caption: "All models are trained with a batch size of 4096 and learning rate warmup of 10k steps. For
# ImageNet we found it beneficial to additionally apply gradient clipping at global norm 1. Training
# resolution is 224."
CAPTION_3 = dict(batch_size=4096, warmup_steps=10_000, clipped_on=("ImageNet",), clip=1.0, resolution=224)

# Table 4: Dataset | Steps | Base LR
PAPER_TABLE_4 = [
    ("ImageNet", 20_000, (0.003, 0.01, 0.03, 0.06)),
    ("CIFAR100", 10_000, (0.001, 0.003, 0.01, 0.03)),
    ("CIFAR10", 10_000, (0.001, 0.003, 0.01, 0.03)),
    ("Oxford-IIIT Pets", 500, (0.001, 0.003, 0.01, 0.03)),
    ("Oxford Flowers-102", 500, (0.001, 0.003, 0.01, 0.03)),
    ("VTAB (19 tasks)", 2_500, (0.01,)),
]
# Caption: "All models are fine-tuned with cosine learning rate decay, a batch size of 512, no weight
# decay, and grad clipping at global norm 1. If not mentioned otherwise, fine-tuning resolution is 384."
# B.1.1: "We fine-tune all ViT models using SGD with a momentum of 0.9."
CAPTION_4 = dict(decay="cosine", batch_size=512, weight_decay=0.0, clip=1.0, resolution=384, momentum=0.9)

DATASETS = {
    "JFT-300M": "jft",
    "ImageNet-21k": "imagenet21k",
    "ImageNet": "imagenet",
    "CIFAR100": "cifar100",
    "CIFAR10": "cifar10",
    "Oxford-IIIT Pets": "pets",
    "Oxford Flowers-102": "flowers",
    "VTAB (19 tasks)": "vtab",
}
ANY_VIT = ("Ti/16", "S/16", "B/16", "B/32", "L/16", "L/32", "H/14", "S/8")  # what "ViT-*" covers, sampled


def expand(models: str) -> list[str]:
    """ "ViT-B/{16,32}" -> ["B/16", "B/32"]; "R50x{1,2}" -> ["BiT-R50x1", ...]; "R50+ViT-L/16" -> ["R50+L/16"]."""
    if models == "ViT-*":
        return list(ANY_VIT)
    match = re.fullmatch(r"(.*)\{(.*)\}", models)
    names = [match[1] + option for option in match[2].split(",")] if match else [models]
    vitlab = []
    for name in names:
        if name.startswith("ViT-"):
            vitlab.append(name.removeprefix("ViT-"))
        elif "+ViT-" in name:
            vitlab.append(name.replace("+ViT-", "+"))
        else:
            vitlab.append("BiT-" + name)
    return vitlab


PRETRAIN_CASES = [(model, *row[1:]) for row in PAPER_TABLE_3 for model in expand(row[0])]


@pytest.mark.parametrize("model, dataset, epochs, lr, decay, weight_decay, dropout", PRETRAIN_CASES)
def test_pretrain_recipe_is_its_table_3_row(model, dataset, epochs, lr, decay, weight_decay, dropout):
    name = DATASETS[dataset]
    config = get_recipe(f"paper-pretrain:{name}:{model}")
    choices = [int(e) for e in epochs.split("/")]
    assert config.model.variant == model and config.recipe == f"paper-pretrain:{name}:{model}"
    assert config.schedule.epochs == choices[0]  # the first value of a two-value cell is the default
    assert (config.optim.name, config.optim.lr, config.schedule.decay) == ("adamw", lr, decay)
    assert (config.optim.weight_decay, config.optim.betas) == (weight_decay, (0.9, 0.999))
    assert config.model.dropout == (None if model.startswith("BiT-") else dropout)  # a ResNet has no dropout
    assert (
        config.data.batch_size == CAPTION_3["batch_size"] and config.micro_batch_size * config.optim.grad_accum == 4096
    )
    assert config.schedule.warmup_steps == CAPTION_3["warmup_steps"] and config.schedule.warmup_epochs == 0
    assert config.optim.grad_clip == (CAPTION_3["clip"] if dataset in CAPTION_3["clipped_on"] else None)
    assert config.model.image_size == CAPTION_3["resolution"]
    for other in choices[1:]:
        assert get_recipe(f"paper-pretrain:{name}:{model}", epochs=other).schedule.epochs == other
    config.validate()


def test_pretrain_recipe_takes_the_model_from_the_cli_and_defaults_to_b16():
    from vitlab.cli import build_parser
    from vitlab.cli.train import build_config

    args = build_parser().parse_args(["train", "--recipe", "paper-pretrain:jft", "--model", "H/14", "--out", "x"])
    config = build_config(args)
    assert (config.model.variant, config.optim.lr, config.schedule.epochs) == ("H/14", 3e-4, 14)
    assert get_recipe("paper-pretrain").recipe == "paper-pretrain:jft:B/16"


@pytest.mark.fault("bad-config", kinds=1)  # per case
@pytest.mark.parametrize(
    "name, choices, words",
    [
        ("paper-pretrain:imagenet21k:H/14", {}, ["'H/14'", "'imagenet21k'"]),
        ("paper-pretrain:imagenet:BiT-R50x1", {}, ["BiT-R50x1"]),
        ("paper-pretrain:imagenet21k:R50+B/16", {}, ["'R50+B/16'", "'imagenet21k'"]),
        ("paper-pretrain:jft300m", {}, ["'jft300m'"]),
        ("paper-pretrain:jft:L/16", {"epochs": 10}, ["7/14", "10"]),
        ("paper-finetune:pets", {"lr": 0.1}, ["0.1", "0.001, 0.003, 0.01, 0.03"]),
    ],
)
def test_pairs_without_a_row_are_refused_in_one_line(name, choices, words):
    with pytest.raises(ConfigError) as error:
        get_recipe(name, **choices)
    message = str(error.value)
    assert "\n" not in message and all(word in message for word in words), message


def test_code_tables_hold_no_row_the_paper_lacks():
    typed = {(model, DATASETS[row[1]]) for row in PAPER_TABLE_3 for model in expand(row[0]) if row[0] != "ViT-*"}
    in_code = {(model, row.dataset) for row in TABLE_3 for model in row.models if model != "ViT-*"}
    assert in_code == typed
    assert set(TABLE_4) == {DATASETS[row[0]] for row in PAPER_TABLE_4}


@pytest.mark.parametrize("dataset, steps, grid", PAPER_TABLE_4)
def test_finetune_recipe_is_its_table_4_row(dataset, steps, grid):
    name = DATASETS[dataset]
    config = get_recipe(f"paper-finetune:{name}")
    assert config.schedule.steps == steps and config.schedule.epochs is None
    assert finetune_lr_grid(name) == grid and config.optim.lr in grid
    for lr in grid:
        assert get_recipe(f"paper-finetune:{name}", lr=lr).optim.lr == lr
    assert (config.optim.name, config.optim.momentum) == ("sgd", CAPTION_4["momentum"])
    assert config.schedule.decay == CAPTION_4["decay"] and config.data.batch_size == CAPTION_4["batch_size"]
    assert config.optim.weight_decay == CAPTION_4["weight_decay"] and config.optim.grad_clip == CAPTION_4["clip"]
    assert config.model.image_size == CAPTION_4["resolution"]


@pytest.mark.parametrize("recipe", [f"paper-finetune:{name}" for name in TABLE_4] + ["small-data", "demo"])
def test_every_schedule_reaches_its_decay(recipe, caplog):
    """Warm-up well under the run (at most a fifth of it), and the rate at the last step far below the peak."""
    config = get_recipe(recipe)
    steps_per_epoch = 100
    optimizer = build_optimizer(create_untrained("mu/4", image_size=8, num_classes=3), config.optim)
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        factor = build_schedule(optimizer, config.schedule, steps_per_epoch).lr_lambdas[0]
    total = config.schedule.steps or config.schedule.epochs * steps_per_epoch
    warmup = config.schedule.warmup_steps or round(config.schedule.warmup_epochs * steps_per_epoch)
    assert 0 < warmup <= total / 5, (warmup, total)
    assert factor(warmup - 1) == 1.0 and factor(total - 1) < 0.01
    assert "warm-up" not in caplog.text


@pytest.mark.fault("bad-config", kinds=2)
def test_a_warmup_as_long_as_the_run_is_warned_with_both_numbers(caplog):
    config = get_recipe("paper-finetune:cifar10")
    optimizer = build_optimizer(torch.nn.Linear(2, 2), config.optim)
    config.schedule.steps = 300  # as --steps 300 would: 500 warm-up steps in a 300-step run
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        build_schedule(optimizer, config.schedule, 10)
    assert "warm-up (500 steps)" in caplog.text and "run (300 steps)" in caplog.text
    caplog.clear()
    config.schedule.steps, config.schedule.warmup_steps, config.schedule.warmup_epochs = None, 0, 5.0
    config.schedule.epochs = 5  # warm-up in epochs, as long as the run
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        build_schedule(optimizer, config.schedule, 10)
    assert "warm-up (50 steps)" in caplog.text and "run (50 steps)" in caplog.text
