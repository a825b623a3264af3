"""`vitlab train | finetune`: the command-line face of vitlab.training. Flags become fields of a typed
TrainConfig; the trainer never sees argparse.

Precedence, lowest first: the recipe, `--config FILE`, the flags, `--set key=value`.
"""

from __future__ import annotations

import argparse
import logging
import sys

from vitlab.config_options import declared_options
from vitlab.errors import InputError
from vitlab.training.config import TrainConfig

from . import COMMANDS, add_declared_flag, with_examples

log = logging.getLogger("vitlab")

# Flag (argparse dest) -> TrainConfig key, from the fields' declarations. Flags left out of a command
# line change nothing.
FLAG_KEYS = {declared.dest: declared.key for declared in declared_options(TrainConfig) if declared.option.flags}
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
    from vitlab.training.recipes import RECIPES, get_recipe

    lines = []
    for name in RECIPES:
        c = get_recipe(name)
        length = f"{c.schedule.steps} steps" if c.schedule.steps else f"{c.schedule.epochs} epochs"
        lines.append(
            f"  {name}: {c.model.variant}, {c.optim.name} lr {c.optim.lr:g}, batch {c.data.batch_size}, "
            f"{length}, {c.schedule.decay} decay, weight decay {c.optim.weight_decay:g}"
        )
    heading = (
        "recipe defaults (of paper-pretrain and paper-finetune, the default row; NAME:DATASET[:MODEL] picks another):"
    )
    return "\n".join([heading, *lines])


def register(subparsers: argparse._SubParsersAction) -> None:
    from vitlab.training.recipes import RECIPES

    recipes = ", ".join(RECIPES)
    defaults = recipe_defaults()
    train = subparsers.add_parser(
        "train",
        help=COMMANDS["train"].help,
        **with_examples(*TRAIN_EXAMPLES, before=defaults),
        description=f"Train a ViT from scratch and write a loadable model folder to --out. Recipes: {recipes} "
        "(default small-data).",
    )
    _add_training_flags(train, "train")
    train.set_defaults(func=run_train, default_recipe="small-data")

    finetune = subparsers.add_parser(
        "finetune",
        help=COMMANDS["finetune"].help,
        **with_examples(*FINETUNE_EXAMPLES, before=defaults),
        description="Load CKPT, replace its head by a zero-initialised one for the new classes, resample the "
        f"position embeddings if --image-size differs, and train. Recipes: {recipes} "
        "(default finetune: the checkpoint's image size, batch 128, 500 steps; paper-finetune is the paper's "
        "384 px, batch 512 and 10,000 steps).",
    )
    _add_training_flags(finetune, "finetune", required=("ckpt",))
    finetune.set_defaults(func=run_train, default_recipe="finetune")


def _add_training_flags(parser: argparse.ArgumentParser, command: str, required: tuple[str, ...] = ()) -> None:
    """--recipe, --config and --set, then a flag for every TrainConfig field that declares one for
    `command` (a pair that TrainConfig.EXCLUSIVE makes exclusive, such as --epochs and --steps,
    in a mutually exclusive group), then --print-config."""
    parser.add_argument(
        "--recipe", metavar="NAME", help="recipe, optionally NAME:DATASET[:MODEL] (paper-finetune:pets)"
    )
    parser.add_argument("--config", metavar="FILE", help="YAML file of config sections (e.g. a run.yaml)")
    parser.add_argument(
        "--set",
        dest="assignments",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one field, e.g. --set optim.weight_decay=0.05 (repeatable)",
    )
    flagged = {d.key: d for d in declared_options(TrainConfig) if d.option.flags}
    groups: dict[frozenset[str], argparse._MutuallyExclusiveGroup] = {}
    for key, declared in flagged.items():
        if declared.option.commands and command not in declared.option.commands:
            continue
        partner = TrainConfig.EXCLUSIVE.get(key)
        target: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup = parser
        if partner in flagged:
            pair = frozenset({key, partner})
            if pair not in groups:
                groups[pair] = parser.add_mutually_exclusive_group()
            target = groups[pair]
        add_declared_flag(target, declared, required=declared.dest in required)
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (as DIR/run.yaml would hold it) and exit without training",
    )


# -- train / finetune --------------------------------------------------------------------------------
def build_config(args: argparse.Namespace):
    """The TrainConfig these arguments describe: recipe < --config < flags < --set."""
    from vitlab.config_fields import apply_mapping, set_value
    from vitlab.textfiles import parse_assignment
    from vitlab.training.config import read_yaml
    from vitlab.training.recipes import get_recipe, warmup_for_length

    document = read_yaml(args.config) if args.config else {}
    recipe = args.recipe or document.get("recipe") or args.default_recipe
    recipe = str(recipe)
    # Table 3's learning rate depends on the model: paper-pretrain takes --model as its row.
    pick_model = getattr(args, "model", None) and recipe.partition(":")[0] == "paper-pretrain"
    choices = {"model": args.model} if pick_model else {}
    config = get_recipe(recipe, **choices)
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
        raise InputError("finetune needs --ckpt CKPT")
    if not {"schedule.warmup_steps", "schedule.warmup_epochs"} & set(origins):  # a warm-up given stays
        warmup_for_length(config, get_recipe(recipe, **choices))
    return config.validate(origins)


def run_train(args: argparse.Namespace) -> int:
    from vitlab.cli import writable_folder
    from vitlab.training import Diverged, Interrupted, Trainer

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
