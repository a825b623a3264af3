"""Every paper recipe against the paper's Tables 3 and 4 and their captions, typed here from the paper
(arXiv 2010.11929, Appendix B.1 and B.1.1) in the paper's own names, independently of the code's table."""

from __future__ import annotations

import logging
import re

import pytest
import torch

from vitlab.model import ConfigError, create_untrained
from vitlab.training import get_recipe
from vitlab.training.optim import build_optimizer, build_schedule
from vitlab.training.paper_recipes import finetune_lr_grid
from vitlab.training.paper_tables import TABLE_3, TABLE_4

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


@pytest.mark.parametrize("recipe", [f"paper-finetune:{name}" for name in TABLE_4] + ["paper-mpp", "small-data", "demo"])
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


# -- the pre-training head (Sec. 3.1, D.3) ---------------------------------------------------------
# Sec. 3.1: "The classification head is implemented by a MLP with one hidden layer at pre-training time
# and by a single linear layer at fine-tuning time." D.3: "a small multi-layer perceptron (MLP) with tanh
# as non-linearity in the single hidden layer". B.1.1: "When transferring ViT models to another dataset,
# we remove the whole head (two linear layers) and replace it by a single, zero-initialized linear layer".
# vit_jax models_vit.py: `x = nn.Dense(features=self.representation_size, name='pre_logits')(x); x = nn.tanh(x)`;
# the 2020 ImageNet-21k checkpoints (ViT-B_16.npz and its siblings) hold that `pre_logits` layer, D wide
# (timm's port of them: vit_base_patch16_224_in21k, representation_size=768); vit_jax README: the
# fine-tuning configs "have `representation_size=None`, i.e. the last layer before the classification
# layer is dropped for fine-tuning".
WIDTH = {"Ti": 192, "S": 384, "B": 768, "L": 1024, "H": 1280}  # Table 1's D (Ti, S: the reference code's)


@pytest.mark.parametrize("model, dataset", [(case[0], case[1]) for case in PRETRAIN_CASES])
def test_pretraining_has_the_papers_head_and_finetuning_drops_it(model, dataset):
    config = get_recipe(f"paper-pretrain:{DATASETS[dataset]}:{model}")
    if model.startswith("BiT-"):  # a ResNet's head is one linear layer
        assert config.model.representation_size is None
        return
    size = model.split("+")[-1].split("/")[0]
    assert config.model.representation_size == WIDTH[size]
    assert get_recipe(f"paper-finetune:{DATASETS['ImageNet']}").model.representation_size is None


def test_the_pretraining_head_is_one_tanh_layer_that_finetuning_replaces():
    spec = get_recipe("paper-pretrain:imagenet:Ti/16").model
    model = create_untrained("Ti/16", image_size=32, num_classes=5, representation_size=spec.representation_size)
    assert [type(layer) for layer in model.pre_logits] == [torch.nn.Linear, torch.nn.Tanh]
    assert model.config.feature_dim == 192  # few-shot evaluation reads the tanh layer's output
    model.reset_classifier(3)
    assert isinstance(model.pre_logits, torch.nn.Identity) and model.config.representation_size is None
    assert not model.head.weight.any()


# -- Table 2's ImageNet fine-tuning (Sec. 4.1) and Table 5's -----------------------------------------
# Sec. 4.1: "For ImageNet results in Table 2, we fine-tuned at higher resolution: 512 for ViT-L/16 and
# 518 for ViT-H/14, and also used Polyak & Juditsky (1992) averaging with a factor of 0.9999".
# Table 5's caption: "Models are fine-tuned at 384 resolution. Note that the ImageNet results are computed
# without additional techniques (Polyak averaging and 512 resolution images) used to achieve results in
# Table 2."
TABLE_2_IMAGENET = {"L/16": 512, "H/14": 518}
POLYAK = 0.9999


def test_imagenet_finetuning_averages_only_in_table_2s_setting():
    table_5 = get_recipe("paper-finetune:imagenet")
    assert (table_5.model.image_size, table_5.optim.ema_decay) == (384, None)
    for model, size in TABLE_2_IMAGENET.items():
        config = get_recipe(f"paper-finetune:imagenet:{model}")
        assert (config.model.image_size, config.optim.ema_decay) == (size, POLYAK)
        assert config.schedule.steps == 20_000 and config.recipe == f"paper-finetune:imagenet:{model}"
        config.validate()


@pytest.mark.fault("bad-config", kinds=3)
@pytest.mark.parametrize("name", ["paper-finetune:imagenet:B/16", "paper-finetune:pets:L/16", "paper-mpp:BiT-R50x1"])
def test_a_model_no_source_gives_settings_of_its_own_is_refused(name):
    """Table 2's ImageNet models are L/16 and H/14; B is not among them."""
    with pytest.raises(ConfigError) as error:
        get_recipe(name)
    message = str(error.value)
    assert "\n" not in message and name.rsplit(":", 1)[1] in message, message


# -- Appendix B.1.2: masked patch pre-training ----------------------------------------------------
# B.1.2: "We trained our self-supervised model for 1M steps (ca. 14 epochs) with batch size 4096 on JFT.
# We use Adam, with a base learning rate of 2·10^-4, warmup of 10k steps and cosine learning rate decay."
# "... we predict the 3-bit, mean color (i.e., 512 colors in total) of every corrupted patch". Sec. 4.6:
# "our smaller ViT-B/16 model achieves 79.9% accuracy on ImageNet". Sec. 4.1: "We train all models ...
# using Adam ... with beta1 = 0.9, beta2 = 0.999 ... and apply a high weight decay of 0.1"; B.1: "all
# training is done on resolution 224".
B_1_2 = dict(steps=1_000_000, batch_size=4096, lr=2e-4, warmup_steps=10_000, decay="cosine")


def test_masked_patch_pretraining_recipe_is_appendix_b_1_2():
    config = get_recipe("paper-mpp")
    assert config.recipe == "paper-mpp:B/16" and config.model.variant == "B/16"
    assert (config.objective.name, config.objective.mpp_target) == ("mpp", "mean-color")
    assert config.schedule.steps == B_1_2["steps"] and config.schedule.epochs is None
    assert config.data.batch_size == B_1_2["batch_size"] == config.micro_batch_size * config.optim.grad_accum
    assert (config.optim.name, config.optim.lr, config.optim.betas) == ("adamw", B_1_2["lr"], (0.9, 0.999))
    assert (config.schedule.warmup_steps, config.schedule.decay) == (B_1_2["warmup_steps"], B_1_2["decay"])
    assert (config.optim.weight_decay, config.model.image_size) == (0.1, 224)
    assert get_recipe("paper-mpp:S/16").model.variant == "S/16"
    config.validate()


# -- quoted results and their settings (vit_jax) -----------------------------------------------------
# vit_jax/configs/common.py: `config.base_lr = 0.03`, `config.warmup_steps = 500`, and for 'cifar10' and
# 'cifar100' `'total_steps': 10_000`. vit_jax/configs/vit.py: `if model == 'b16' and dataset == 'cifar10':
# config.base_lr = 0.01`. README (models from gs://vit_models/imagenet21k), column dropout=0.0:
# "ViT-B_16 | cifar10 | 99.02%", "ViT-B_16 | cifar100 | 92.06%". README, shorter schedules,
# "total_steps / warmup_steps": "ViT-B_16 | cifar10 | 500 / 50 | 98.59%", "1000 / 100 | 98.86%",
# "cifar100 | 500 / 50 | 89.17%", "1000 / 100 | 91.15%"; those ran in 2020 with vit_jax/flags.py's
# `--base_lr ... default=0.03` and configs.py's B/16 `dropout_rate = 0.1`.
VIT_JAX_README = [  # (dataset, steps, warm-up, lr, dropout, top-1)
    ("cifar10", 10_000, 500, 0.01, 0.0, 99.02),
    ("cifar100", 10_000, 500, 0.03, 0.0, 92.06),
    ("cifar10", 500, 50, 0.03, 0.1, 98.59),
    ("cifar10", 1_000, 100, 0.03, 0.1, 98.86),
    ("cifar100", 500, 50, 0.03, 0.1, 89.17),
    ("cifar100", 1_000, 100, 0.03, 0.1, 91.15),
]


def test_every_quoted_run_is_vit_jaxs_and_the_recipe_gives_its_settings():
    from vitlab.training.quoted_runs import QUOTED_RUNS

    assert sorted((r.row, r.steps, r.warmup_steps, r.lr, r.dropout, r.top1) for r in QUOTED_RUNS) == sorted(
        VIT_JAX_README
    )
    for run in QUOTED_RUNS:
        assert run.model == "B/16"
        name = f"paper-finetune:{run.row}" + (":B/16" if run.lr != 0.03 else "")
        config = get_recipe(name, steps=run.steps)
        assert (config.optim.lr, config.schedule.steps, config.schedule.warmup_steps) == (
            run.lr,
            run.steps,
            run.warmup_steps,
        ), name
        assert config.model.image_size == 384 and config.data.batch_size == 512 and config.optim.momentum == 0.9


def test_recipe_docstrings_quote_only_quoted_runs():
    """Every percentage paper_finetune's docstring gives is a run of QUOTED_RUNS (with its settings)."""
    from vitlab.training.paper_recipes import paper_finetune
    from vitlab.training.quoted_runs import QUOTED_RUNS

    quoted = {float(number) for number in re.findall(r"(\d+\.\d+)%", paper_finetune.__doc__ or "")}
    assert quoted and quoted <= {run.top1 for run in QUOTED_RUNS}, quoted


# -- warm-up of a run of another length ------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, warmup",
    [
        (["--recipe", "paper-finetune:cifar10", "--steps", "500"], 50),  # vit_jax's 500 / 50
        (["--recipe", "paper-finetune:cifar100", "--steps", "1000"], 100),  # vit_jax's 1000 / 100
        (["--recipe", "paper-finetune:cifar10", "--steps", "2000"], 100),  # the row's 500 of 10k
        (["--recipe", "paper-finetune:pets", "--steps", "100"], 20),  # the row's 100 of 500
        (["--recipe", "paper-finetune:cifar10", "--steps", "500", "--set", "schedule.warmup_steps=300"], 300),
        (["--recipe", "paper-finetune:cifar10"], 500),
    ],
)
def test_a_finetune_of_another_length_scales_its_warmup(argv, warmup, caplog):
    from vitlab.cli import build_parser
    from vitlab.cli.train import build_config

    args = build_parser().parse_args(["finetune", "--ckpt", "B/16:x", "--out", "x", *argv])
    with caplog.at_level(logging.INFO, logger="vitlab"):
        config = build_config(args)
    assert config.schedule.warmup_steps == warmup
    steps = config.schedule.steps
    if steps != 10_000 and "schedule.warmup_steps=300" not in argv:
        assert f"warm-up {warmup} of {steps} steps" in caplog.text  # both numbers, the recipe's too
        assert f"of {TABLE_4[config.recipe.split(':')[1]].steps}" in caplog.text


def test_other_recipes_scale_their_warmup_alike():
    from vitlab.cli import build_parser
    from vitlab.cli.train import build_config

    demo = build_config(build_parser().parse_args(["train", "--recipe", "demo", "--steps", "600", "--out", "x"]))
    assert demo.schedule.warmup_steps == 50  # 100 of 1200
    small = build_config(build_parser().parse_args(["train", "--epochs", "20", "--out", "x"]))
    assert small.schedule.warmup_epochs == 0.5  # 5 of 200
    pretrain = build_parser().parse_args(
        ["train", "--recipe", "paper-pretrain:jft:L/16", "--epochs", "14", "--out", "x"]
    )
    assert build_config(pretrain).schedule.warmup_steps == 10_000  # Table 3: 10k steps, whatever the epochs
