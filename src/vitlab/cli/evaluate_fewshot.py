"""`vitlab fewshot`: few-shot linear evaluation and a linear probe of a checkpoint's frozen features."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vitlab.config_fields import Range
from vitlab.errors import InputError

from . import COMMANDS, add_checkpoint_argument, add_runtime_arguments, number, with_examples, worker_count


def parse_shots(text: str) -> list[int]:
    try:
        shots = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 1,5,10,25, got {text!r}") from None
    if not shots or min(shots) < 1:
        raise argparse.ArgumentTypeError(f"shots must be positive integers, got {text!r}")
    return shots


EXAMPLES = (  # the end of --help
    "vitlab fewshot --ckpt runs/demo --data digits",
    "vitlab fewshot --ckpt B/16:augreg-in21k --data cifar10:DIR --shots 1,5,10 --out fewshot.json",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    from vitlab.evaluate.fewshot import L2_REG, NUM_SEEDS, SHOTS

    parser = subparsers.add_parser(
        "fewshot",
        **with_examples(*EXAMPLES),
        help=COMMANDS["fewshot"].help,
        description="Fit linear classifiers on the frozen pre-logits features of the training split with "
        "k examples per class (and on all of them), and report top-1 on the validation split.",
    )
    add_checkpoint_argument(parser)
    parser.add_argument(
        "--data", required=True, help="data source: digits, an ImageFolder root, CIFAR, shards, hf:NAME[:SPLIT]"
    )
    parser.add_argument(
        "--shots",
        type=parse_shots,
        default=list(SHOTS),
        help=f"examples per class (default: {','.join(map(str, SHOTS))})",
    )
    parser.add_argument(
        "--l2", type=number(float, Range(0)), default=L2_REG, help=f"ridge penalty (default: 2^10 = {L2_REG:g})"
    )
    parser.add_argument(
        "--seeds", type=int, default=NUM_SEEDS, help=f"random draws averaged per shot count (default: {NUM_SEEDS})"
    )
    parser.add_argument("--no-probe", action="store_true", help="skip the linear probe on all training features")
    parser.add_argument(
        "--batch-size", type=int, default=128, metavar="N", help="images per feature batch (default: 128)"
    )
    parser.add_argument("--workers", type=worker_count(), default=0, help="data-loading processes (default: 0)")
    parser.add_argument("--out", help="also write the results to this JSON file")
    add_runtime_arguments(parser, precision=False)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from vitlab.accel import accelerate
    from vitlab.cli import load_checkpoint, memory_limit
    from vitlab.data import load_datasets
    from vitlab.evaluate import evaluate_representation
    from vitlab.evaluate.predict import eval_transform
    from vitlab.memory.budget import batches_in_flight, check_memory
    from vitlab.runtime import resolve_device

    if args.seeds < 1:
        raise InputError(f"--seeds must be at least 1, got {args.seeds}")
    if args.batch_size < 1:
        raise InputError(f"--batch-size must be >= 1, got {args.batch_size}")
    model = load_checkpoint(args)
    in_flight = batches_in_flight(args.batch_size, model.config.image_size, args.workers)
    check_memory(model.config, args.batch_size, limit=memory_limit(args), source=str(args.ckpt), in_flight=in_flight)
    model = accelerate(model.to(resolve_device(args.device)).eval())
    # Frozen features: both splits get the evaluation transform, as in big_vision.
    transform = eval_transform(model.config)
    splits = load_datasets(args.data, transform, transform)
    result = evaluate_representation(
        model,
        splits.train,
        splits.val,
        shots=args.shots,
        l2=args.l2,
        seeds=args.seeds,
        probe=not args.no_probe,
        batch_size=args.batch_size,
        num_workers=args.workers,
        num_classes=splits.num_classes,
        class_names=[str(name) for name in splits.class_names],
    )
    result.update(ckpt=str(args.ckpt), data=args.data, train_images=len(splits.train), test_images=len(splits.val))
    fewshot = result["fewshot"]
    print(
        f"few-shot linear, {result['feature_dim']}-d pre-logits features, l2 {fewshot['l2']:g}, "
        f"{fewshot['seeds']} seeds, {result['test_images']} test images:"
    )
    for shots, score in fewshot["shots"].items():
        print(f"  {shots:>3}-shot  {100 * score['mean']:6.2f}%  (std {100 * score['std']:.2f})")
    if "linear_probe" in result:
        probe = result["linear_probe"]
        print(f"linear probe on all {probe['train_samples']} training images: {100 * probe['accuracy']:.2f}%")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
        print(f"results: {out}")
    return 0
