"""`vitlab train | finetune`: the command-line face of vitlab.train. Flags become fields of a typed
TrainConfig; the trainer never sees argparse.

Precedence, lowest first: the recipe, `--config FILE`, the flags, `--set key=value`.
"""

from __future__ import annotations

import argparse
import logging
import sys
import typing

from vitlab.train.config import BestMetric, DataParallel, MppTarget, ObjectiveName

from . import CKPT_HELP, add_memory_argument, add_runtime_arguments, with_examples

log = logging.getLogger("vitlab")

# Flag (argparse dest) -> TrainConfig key. Flags left out of a command line change nothing.
FLAG_KEYS = {
    "data": "data.source",
    "model": "model.variant",
    "ckpt": "model.init",
    "out": "run.out",
    "image_size": "model.image_size",
    "epochs": "schedule.epochs",
    "steps": "schedule.steps",
    "batch_size": "data.batch_size",
    "lr": "optim.lr",
    "seed": "run.seed",
    "resume": "run.resume",
    "device": "run.device",
    "precision": "run.precision",
    "workers": "data.workers",
    "threads": "run.threads",
    "grad_accum": "optim.grad_accum",
    "eval_every": "run.eval_every",
    "ckpt_every_steps": "run.ckpt_every_steps",
    "ckpt_every_minutes": "run.ckpt_every_minutes",
    "keep_ckpts": "run.keep_ckpts",
    "max_bad_steps": "run.max_bad_steps",
    "ema": "optim.ema_decay",
    "compile": "run.compile",
    "grad_checkpointing": "run.grad_checkpointing",
    "memory_limit": "run.memory_limit",
    "data_parallel": "run.data_parallel",
    "download": "data.download",
    "layer_decay": "optim.layer_decay",
    "trainable_blocks": "model.trainable_blocks",
    "reprob": "augment.reprob",
    "repeats": "augment.repeats",
    "decode_device": "data.decode_device",
}
# What a run keeps and logs besides the last model (vitlab.train.best, vitlab.train.run_logs).
FLAG_KEYS.update(
    {
        "keep_best_by": "run.keep_best_by",
        "early_stop_patience": "run.early_stop_patience",
        "tensorboard": "run.tensorboard",
    }
)
FLAG_KEYS.update({"objective": "objective.name", "mpp_target": "objective.mpp_target"})  # objectives.py
SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143}
TRAIN_EXAMPLES = (  # the end of --help
    "vitlab train --data digits --out runs/digits --steps 500",
    "vitlab train --data cifar10:DIR --out runs/c10 --keep-best-by val_top1 --early-stop-patience 5 --tensorboard",
    "vitlab train --config runs/c10/run.yaml --out runs/c10 --resume --epochs 300  # a longer total",
)
FINETUNE_EXAMPLES = (
    "vitlab finetune --ckpt B/16:augreg-in21k --data cifar10:DIR --out runs/ft",
    "vitlab finetune --ckpt runs/c10 --recipe paper-finetune:pets --data imagefolder:PETS --out runs/pets",
    "vitlab finetune --ckpt B/16:augreg-in21k --data digits --out runs/ft --print-config",
)


def recipe_defaults() -> str:
    """One line per recipe with the settings it trains with, read from the registry (for --help)."""
    from vitlab.train.recipes import RECIPES, get_recipe

    lines = []
    for name in RECIPES:
        c = get_recipe(name)
        length = f"{c.schedule.steps} steps" if c.schedule.steps else f"{c.schedule.epochs} epochs"
        lines.append(
            f"  {name}: {c.model.variant}, {c.optim.name} lr {c.optim.lr:g}, batch {c.data.batch_size}, "
            f"{length}, {c.schedule.decay} decay, weight decay {c.optim.weight_decay:g}"
        )
    heading = "recipe defaults (of paper-pretrain and paper-finetune, the default row; NAME:DATASET picks another):"
    return "\n".join([heading, *lines])


def register(subparsers: argparse._SubParsersAction) -> None:
    from vitlab.train.recipes import RECIPES

    recipes = ", ".join(RECIPES)
    defaults = recipe_defaults()
    train = subparsers.add_parser(
        "train",
        help="train a ViT from scratch",
        **with_examples(*TRAIN_EXAMPLES, before=defaults),
        description=f"Train a ViT from scratch and write a loadable model folder to --out. Recipes: {recipes} "
        "(default small-data).",
    )
    train.add_argument("--model", metavar="VARIANT", help="variant such as Ti/16 or B/16 (default: the recipe's)")
    _add_training_flags(train)
    train.set_defaults(func=run_train, default_recipe="small-data")

    finetune = subparsers.add_parser(
        "finetune",
        help="fine-tune a checkpoint on new data (paper Sec. 3.2)",
        **with_examples(*FINETUNE_EXAMPLES, before=defaults),
        description="Load CKPT, replace its head by a zero-initialised one for the new classes, resample the "
        f"position embeddings if --image-size differs, and train. Recipes: {recipes} "
        "(default paper-finetune).",
    )
    # --ckpt as every command that reads a model spells it; --init, its earlier name, still works.
    finetune.add_argument("--ckpt", "--init", dest="ckpt", metavar="CKPT", required=True, help=CKPT_HELP)
    _add_training_flags(finetune)
    finetune.set_defaults(func=run_train, default_recipe="paper-finetune")


def _add_training_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data", metavar="SRC", help="digits | [imagefolder:]DIR | cifar10:DIR | cifar100:DIR | [wds:]SHARDS"
    )
    parser.add_argument("--out", metavar="DIR", help="output folder: model, metrics, plot, checkpoints")
    parser.add_argument("--recipe", metavar="NAME", help="recipe, optionally NAME:DATASET (paper-finetune:pets)")
    parser.add_argument("--config", metavar="FILE", help="YAML file of config sections (e.g. a run.yaml)")
    parser.add_argument(
        "--set",
        dest="assignments",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one field, e.g. --set optim.weight_decay=0.05 (repeatable)",
    )
    parser.add_argument("--image-size", type=int, metavar="N")
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=int, metavar="N")
    length.add_argument("--steps", type=int, metavar="N", help="optimiser steps")
    parser.add_argument("--batch-size", type=int, metavar="N", help="images per optimiser step")
    parser.add_argument("--grad-accum", type=int, metavar="N", help="micro-batches per optimiser step")
    parser.add_argument("--lr", type=float, metavar="X", help="peak learning rate")
    parser.add_argument("--seed", type=int, metavar="N")
    parser.add_argument("--resume", action="store_true", default=None, help="continue from DIR/checkpoints/latest")
    add_runtime_arguments(
        parser, default=None, precision_help="auto: bf16 on GPUs with bf16, fp16 on other GPUs, fp32 on CPU"
    )
    parser.add_argument("--workers", type=int, metavar="N", help="data-loader worker processes")
    parser.add_argument("--threads", type=int, metavar="N", help="CPU threads for torch")
    parser.add_argument("--eval-every", type=int, metavar="STEPS", help="default: every epoch")
    parser.add_argument("--ckpt-every-steps", type=int, metavar="N")
    parser.add_argument("--ckpt-every-minutes", type=float, metavar="M")
    parser.add_argument("--keep-ckpts", type=int, metavar="K", help="checkpoints kept (newest)")
    parser.add_argument(
        "--max-bad-steps",
        type=int,
        metavar="N",
        help="stop after N steps in a row with a non-finite loss or gradient (each is skipped)",
    )
    parser.add_argument(
        "--ema",
        type=float,
        nargs="?",
        const=0.9999,
        metavar="DECAY",
        help="average the weights (Polyak/EMA; default decay 0.9999)",
    )
    parser.add_argument("--compile", action="store_true", default=None, help="torch.compile the model")
    parser.add_argument(
        "--grad-checkpointing",
        "--grad-ckpt",
        dest="grad_checkpointing",
        action="store_true",
        default=None,
        help="gradient checkpointing (recompute activations in the backward pass)",
    )
    add_memory_argument(parser)
    parser.add_argument(
        "--data-parallel",
        choices=typing.get_args(DataParallel),
        help="under torchrun: ddp copies the model to every process, fsdp shards it (default ddp)",
    )
    parser.add_argument("--download", action="store_true", default=None, help="fetch CIFAR-10/100 if missing")
    parser.add_argument(
        "--layer-decay",
        type=float,
        metavar="X",
        help="layer-wise learning-rate decay (BEiT/MAE fine-tuning): of n layers, layer l trains at lr * X^(n-1-l)",
    )
    parser.add_argument(
        "--trainable-blocks",
        type=int,
        metavar="K",
        help="train only the last K blocks and the head, freeze the rest; 0: the head alone (for "
        "a logistic-regression probe on fixed features see vitlab fewshot)",
    )
    parser.add_argument("--reprob", type=float, metavar="P", help="random erasing probability (timm's, pixel mode)")
    parser.add_argument(
        "--repeats",
        type=int,
        metavar="N",
        help="repeated augmentation (DeiT): each image N times in a row, differently augmented",
    )
    parser.add_argument(
        "--objective",
        choices=typing.get_args(ObjectiveName),
        help="classify: the labels (default); mpp: masked patch prediction, self-supervised (paper Sec. 4.6)",
    )
    parser.add_argument(
        "--mpp-target",
        choices=typing.get_args(MppTarget),
        help="mpp's target: the 3-bit mean colour (default, the paper's), a 4x4 patch of 3-bit colours, L2 on pixels",
    )
    parser.add_argument(
        "--gpu-decode",
        dest="decode_device",
        action="store_const",
        const="cuda",
        help="decode JPEGs, crop, flip, RandAugment, normalise and erase on the training GPU (data.decode_device=cuda); "
        "a run on the CPU falls back to the CPU pipeline and logs it",
    )
    _add_outputs_flags(parser)


def _add_outputs_flags(parser: argparse.ArgumentParser) -> None:
    """What a run keeps and logs besides the last model, and --print-config."""
    parser.add_argument(
        "--keep-best-by",
        choices=typing.get_args(BestMetric),
        help="also keep the best model by this metric in DIR/best/ (val_loss: lowest)",
    )
    parser.add_argument(
        "--early-stop-patience",
        type=int,
        metavar="N",
        help="stop after N evaluations without a better --keep-best-by metric (default val_top1)",
    )
    parser.add_argument(
        "--tensorboard",
        action="store_true",
        default=None,
        help="write TensorBoard event files to DIR/tensorboard (metrics.csv is always written)",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (as DIR/run.yaml would hold it) and exit without training",
    )


# -- train / finetune --------------------------------------------------------------------------------
def build_config(args: argparse.Namespace):
    """The TrainConfig these arguments describe: recipe < --config < flags < --set."""
    from vitlab.train.config import apply_mapping, parse_assignment, read_yaml, set_value
    from vitlab.train.recipes import get_recipe

    document = read_yaml(args.config) if args.config else {}
    recipe = args.recipe or document.get("recipe") or args.default_recipe
    recipe = str(recipe)
    # Table 3's learning rate depends on the model: paper-pretrain takes --model as its row.
    pick_model = getattr(args, "model", None) and recipe.partition(":")[0] == "paper-pretrain"
    config = get_recipe(recipe, **({"model": args.model} if pick_model else {}))
    apply_mapping(config, document, str(args.config))
    # Where each key was last set, so that an out-of-range value names its file or flag.
    origins = {
        f"{section}.{name}": str(args.config)
        for section, values in document.items()
        if isinstance(values, dict)
        for name in values
    }
    for flag, key in FLAG_KEYS.items():
        value = getattr(args, flag, None)
        if value is not None:
            origins[key] = f"--{flag.replace('_', '-')}"
            set_value(config, key, value, origins[key])
    for text in args.assignments:
        key, value = parse_assignment(text)
        origins[key] = f"--set {text}"
        set_value(config, key, value, origins[key])
    if args.command == "finetune" and not config.model.init:
        raise ValueError("finetune needs --ckpt CKPT")
    return config.validate(origins)


def run_train(args: argparse.Namespace) -> int:
    from vitlab.cli import writable_folder
    from vitlab.train import Diverged, Interrupted, Trainer

    config = build_config(args)
    if args.print_config:  # nothing is created or trained
        print(config.to_yaml(), end="")
        return 0
    if config.run.out:
        writable_folder(config.run.out)
    trainer = Trainer(config)
    try:
        result = trainer.fit()
    except Interrupted as stop:
        print(
            f"vitlab {args.command}: stopped by {stop.signal_name} at step {stop.step}; checkpoint "
            f"{stop.checkpoint}; run the same command with --resume to continue",
            file=sys.stderr,
        )
        return SIGNAL_EXIT.get(stop.signal_name, 1)
    except Diverged as error:
        print(f"vitlab {args.command}: {error}", file=sys.stderr)
        return 3
    summary = result.summary
    if not trainer.processes.is_main:  # under torchrun, process 0 reports
        return 0
    print(f"{trainer.objective.describe(summary)}  after {summary['steps']} steps in {summary['wall_time_s']:.0f} s")
    print(f"model folder: {result.out}  (vitlab.load({str(result.out)!r}))")
    print(f"training curve: {result.out / 'training_curve.png'}")
    return 0
