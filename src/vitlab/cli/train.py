"""`vitlab train | finetune | predict | demo` (and `eval`, in evaluate.py): the command-line face
of vitlab.train and vitlab.evaluate. Flags become fields of a typed TrainConfig; the trainer never sees argparse.

Precedence, lowest first: the recipe, `--config FILE`, the flags, `--set key=value`.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from pathlib import Path

from . import add_checkpoint_argument, add_memory_argument

log = logging.getLogger("vitlab")

# Flag (argparse dest) -> TrainConfig key. Flags left out of a command line change nothing.
FLAG_KEYS = {
    "data": "data.source",
    "model": "model.variant",
    "init": "model.init",
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
    "grad_ckpt": "run.grad_checkpointing",
    "memory_limit": "run.memory_limit",
    "data_parallel": "run.data_parallel",
    "download": "data.download",
}
DEVICES = ("auto", "cpu", "cuda", "mps")
PRECISIONS = ("auto", "bf16", "fp16", "fp32")
SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143}


def register(subparsers: argparse._SubParsersAction) -> None:
    from vitlab.train.recipes import RECIPES

    recipes = ", ".join(RECIPES)
    train = subparsers.add_parser(
        "train", help="train a ViT from scratch",
        description=f"Train a ViT from scratch and write a loadable model folder to --out. Recipes: {recipes} "
                    "(default small-data).")
    train.add_argument("--model", metavar="VARIANT", help="variant such as Ti/16 or B/16 (default: the recipe's)")
    _add_training_flags(train)
    train.set_defaults(func=run_train, default_recipe="small-data")

    finetune = subparsers.add_parser(
        "finetune", help="fine-tune a checkpoint on new data (paper Sec. 3.2)",
        description="Load CKPT, replace its head by a zero-initialised one for the new classes, resample the "
                    f"position embeddings if --image-size differs, and train. Recipes: {recipes} "
                    "(default paper-finetune).")
    finetune.add_argument("--init", metavar="CKPT", required=True, help="anything vitlab.load accepts")
    _add_training_flags(finetune)
    finetune.set_defaults(func=run_train, default_recipe="paper-finetune")

    predict = subparsers.add_parser("predict", help="class probabilities for image files")
    add_checkpoint_argument(predict)
    predict.add_argument("images", nargs="+", metavar="IMAGE_OR_DIR", help="image files or folders of them")
    predict.add_argument("--topk", type=int, default=5, metavar="K", help="classes shown per image (default 5)")
    predict.add_argument("--json", action="store_true", help="print JSON instead of text")
    predict.add_argument("--runtime", choices=("torch", "onnx"), default="torch",
                         help="onnx: --ckpt is a file from `vitlab export --format onnx`, run by onnxruntime")
    _add_inference_flags(predict)
    predict.set_defaults(func=run_predict)

    demo = subparsers.add_parser(
        "demo", help="train a small ViT on the built-in digits, evaluate it, predict a few images",
        description="Runs `vitlab train --recipe demo`, `vitlab eval` and `vitlab predict` on a few digits "
                    "saved as PNG, printing each command first.")
    demo.add_argument("--out", default="runs/demo", metavar="DIR", help="model folder (default runs/demo)")
    demo.add_argument("--samples", type=int, default=6, help="validation digits to save and predict")
    demo.set_defaults(func=run_demo)


def _add_training_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", metavar="SRC",
                        help="digits | [imagefolder:]DIR | cifar10:DIR | cifar100:DIR | [wds:]SHARDS")
    parser.add_argument("--out", metavar="DIR", help="output folder: model, metrics, plot, checkpoints")
    parser.add_argument("--recipe", metavar="NAME", help="recipe, optionally NAME:DATASET (paper-finetune:pets)")
    parser.add_argument("--config", metavar="FILE", help="YAML file of config sections (e.g. a run.yaml)")
    parser.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE",
                        help="change one field, e.g. --set optim.weight_decay=0.05 (repeatable)")
    parser.add_argument("--image-size", type=int, metavar="N")
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=int, metavar="N")
    length.add_argument("--steps", type=int, metavar="N", help="optimiser steps")
    parser.add_argument("--batch-size", type=int, metavar="N", help="images per optimiser step")
    parser.add_argument("--grad-accum", type=int, metavar="N", help="micro-batches per optimiser step")
    parser.add_argument("--lr", type=float, metavar="X", help="peak learning rate")
    parser.add_argument("--seed", type=int, metavar="N")
    parser.add_argument("--resume", action="store_true", default=None, help="continue from DIR/checkpoints/latest")
    parser.add_argument("--device", choices=DEVICES)
    parser.add_argument("--precision", choices=PRECISIONS,
                        help="auto: bf16 on GPUs with bf16, fp16 on other GPUs, fp32 on CPU")
    parser.add_argument("--workers", type=int, metavar="N", help="data-loader worker processes")
    parser.add_argument("--threads", type=int, metavar="N", help="CPU threads for torch")
    parser.add_argument("--eval-every", type=int, metavar="STEPS", help="default: every epoch")
    parser.add_argument("--ckpt-every-steps", type=int, metavar="N")
    parser.add_argument("--ckpt-every-minutes", type=float, metavar="M")
    parser.add_argument("--keep-ckpts", type=int, metavar="K", help="checkpoints kept (newest)")
    parser.add_argument("--max-bad-steps", type=int, metavar="N",
                        help="stop after N steps in a row with a non-finite loss or gradient (each is skipped)")
    parser.add_argument("--ema", type=float, nargs="?", const=0.9999, metavar="DECAY",
                        help="average the weights (Polyak/EMA; default decay 0.9999)")
    parser.add_argument("--compile", action="store_true", default=None, help="torch.compile the model")
    parser.add_argument("--grad-ckpt", action="store_true", default=None, help="gradient checkpointing")
    add_memory_argument(parser)
    parser.add_argument("--data-parallel", choices=("ddp", "fsdp"),
                        help="under torchrun: ddp copies the model to every process, fsdp shards it (default ddp)")
    parser.add_argument("--download", action="store_true", default=None, help="fetch CIFAR-10/100 if missing")


def _add_inference_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch-size", type=int, default=64, metavar="N")
    parser.add_argument("--device", choices=DEVICES, default="auto")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto")


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
    origins = {f"{section}.{name}": str(args.config) for section, values in document.items()
               if isinstance(values, dict) for name in values}
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
        raise ValueError("finetune needs --init CKPT")
    return config.validate(origins)


def run_train(args: argparse.Namespace) -> int:
    from vitlab.evaluate import describe_top5
    from vitlab.train import Diverged, Interrupted, Trainer

    from vitlab.cli import writable_folder

    config = build_config(args)
    if config.run.out:
        writable_folder(config.run.out)
    trainer = Trainer(config)
    try:
        result = trainer.fit()
    except Interrupted as stop:
        print(f"vitlab {args.command}: stopped by {stop.signal_name} at step {stop.step}; checkpoint "
              f"{stop.checkpoint}; run the same command with --resume to continue", file=sys.stderr)
        return SIGNAL_EXIT.get(stop.signal_name, 1)
    except Diverged as error:
        print(f"vitlab {args.command}: {error}", file=sys.stderr)
        return 3
    summary = result.summary
    if not trainer.processes.is_main:  # under torchrun, process 0 reports
        return 0
    top5 = describe_top5(summary["val_top5"], len(trainer.class_names))
    print(f"val top-1 {summary['val_top1']:.4f}  {top5}  after {summary['steps']} steps "
          f"in {summary['wall_time_s']:.0f} s")
    print(f"model folder: {result.out}  (vitlab.load({str(result.out)!r}))")
    print(f"training curve: {result.out / 'training_curve.png'}")
    return 0


# -- predict -------------------------------------------------------------------------------------------
def _load_for_inference(args: argparse.Namespace, **overrides):
    from vitlab.cli import load_checkpoint, memory_limit
    from vitlab.model.budget import check_memory
    from vitlab.train.precision import resolve_device, resolve_precision

    device = resolve_device(args.device)
    precision = resolve_precision(args.precision, device)
    model = load_checkpoint(args, **overrides)
    check_memory(model.config, args.batch_size, limit=memory_limit(args), source=str(args.ckpt))  # this command's batch
    return model.to(device).eval(), device, precision


def _preview(names: list[str], count: int = 5) -> str:
    shown = ", ".join(map(str, names[:count]))
    return f"[{shown}{', ...' if len(names) > count else ''}] ({len(names)})"


def run_predict(args: argparse.Namespace) -> int:
    from vitlab.cli import UserError
    from vitlab.data import BadImageError, read_image
    from vitlab.data.images import image_files
    from vitlab.evaluate import predict_images

    if args.topk < 1:
        raise UserError(f"--topk must be >= 1, got {args.topk}")
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {args.batch_size}")
    files = image_files(args.images)
    images, readable = [], []
    for path in files:
        try:
            images.append(read_image(path))
            readable.append(path)
        except BadImageError as error:
            print(f"vitlab predict: skipping {error}", file=sys.stderr)
    if not images:
        raise UserError("none of the images can be read")
    if args.runtime == "onnx":  # same preprocessing and top-k: the ONNX file runs as a vitlab model
        from vitlab.export import OnnxModel

        predictions = predict_images(OnnxModel(args.ckpt), images, topk=args.topk, batch_size=args.batch_size)
    else:
        model, _, precision = _load_for_inference(args)
        predictions = predict_images(model, images, topk=args.topk, batch_size=args.batch_size,
                                     autocast=precision.autocast)
    if args.json:
        print(json.dumps([{"path": str(path), "top": [{"label": label, "prob": prob} for label, prob in p.top]}
                          for path, p in zip(readable, predictions)], indent=2))
    else:
        for path, prediction in zip(readable, predictions):
            print(f"{path}: " + ", ".join(f"{label} ({prob:.3f})" for label, prob in prediction.top))
    return 0 if len(readable) == len(files) else 1


# -- demo ------------------------------------------------------------------------------------------------
def write_digit_samples(directory: Path, count: int) -> list[Path]:
    """Save the first `count` validation digits as PNG files named after their true label."""
    from vitlab.data import load_datasets

    directory.mkdir(parents=True, exist_ok=True)
    val = load_datasets("digits", None, None).val
    paths = []
    for index in range(min(count, len(val))):
        image, label = val[index]
        path = directory / f"val{index:03d}-true{label}.png"
        image.save(path)
        paths.append(path)
    return paths


def run_demo(args: argparse.Namespace) -> int:
    from vitlab.cli import main

    out = Path(args.out)
    samples = out / "samples"
    commands = [
        ["train", "--recipe", "demo", "--data", "digits", "--out", str(out)],
        ["eval", "--ckpt", str(out), "--data", "digits", "--out", str(out / "eval.json")],
        ["predict", "--ckpt", str(out), str(samples), "--topk", "3"],
    ]
    if (out / "checkpoints").is_dir():
        commands[0].append("--resume")  # a second `make demo` continues (or re-reports) the first
    for command in commands:
        if command[0] == "predict":
            write_digit_samples(samples, args.samples)
            print(f"(wrote {args.samples} validation digits to {samples}/)", flush=True)
        print(f"\n$ vitlab {shlex.join(command)}", flush=True)
        status = main(command)
        if status:
            return status
    print(f"\nmodel folder: {out}\ntraining curve: {out / 'training_curve.png'}\nmetrics: {out / 'metrics.jsonl'}")
    return 0
