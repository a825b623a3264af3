"""`vitlab demo`: train a small ViT on the built-in digits, evaluate it and predict a few of them,
each step the `vitlab` command a user would type."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from . import COMMANDS, with_examples

EXAMPLES = (  # the end of --help
    "vitlab demo",
    "vitlab demo --out runs/demo2 --samples 8",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo",
        **with_examples(*EXAMPLES),
        help=COMMANDS["demo"].help,
        description="Runs `vitlab train --recipe demo`, `vitlab eval` and `vitlab predict` on a few digits "
        "saved as PNG, printing each command first.",
    )
    demo.add_argument("--out", default="runs/demo", metavar="DIR", help="model folder (default runs/demo)")
    demo.add_argument("--samples", type=int, default=6, help="validation digits to save and predict")
    demo.set_defaults(func=run_demo)


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
        ["eval", "--ckpt", str(out), "--data", "digits", "--out", str(out / "eval_summary.json")],
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
