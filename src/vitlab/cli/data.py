"""`vitlab data fractaldb`: write a FractalDB pre-training set (formula-drawn, no download)."""

from __future__ import annotations

import argparse
import os

from vitlab.config_fields import SEED_RANGE

from . import COMMANDS, number, with_examples, worker_count

EXAMPLES = (  # the end of --help
    "vitlab data fractaldb --classes 10 --per-class 20 --size 32 --out data/fdb10",
    "vitlab data fractaldb --classes 100 --per-class 50 --size 64 --out data/fdb100",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("data", help=COMMANDS["data"].help, **with_examples(*EXAMPLES[:1]))
    commands = parser.add_subparsers(dest="data_command", metavar="DATASET", required=True)
    fractaldb = commands.add_parser(
        "fractaldb",
        **with_examples(*EXAMPLES),
        help="FractalDB: iterated-function-system fractal categories (Kataoka et al. 2020)",
        description="Search IFS fractal categories (filling rate >= 0.2) and render instances of each.",
    )
    fractaldb.add_argument("--classes", type=int, required=True, help="number of fractal categories")
    fractaldb.add_argument("--per-class", type=int, required=True, help="images per category")
    fractaldb.add_argument("--size", type=int, required=True, help="image side in pixels")
    fractaldb.add_argument("--out", required=True, help="output folder (created; must be empty)")
    fractaldb.add_argument(
        "--seed", type=number(int, SEED_RANGE), default=0, help="the same seed gives the same images (default 0)"
    )
    fractaldb.add_argument(
        "--format",
        choices=("folder", "wds"),
        default="folder",
        help="folder: an ImageFolder of PNGs; wds: WebDataset shards (default folder)",
    )
    fractaldb.add_argument(
        "--workers",
        type=worker_count(1),
        default=min(os.cpu_count() or 1, 8),
        help="processes; the output does not depend on it (default: the CPU count, at most 8)",
    )
    fractaldb.set_defaults(func=run_fractaldb)


def run_fractaldb(args: argparse.Namespace) -> int:
    from vitlab.data.fractaldb import FractalDBSpec, generate_fractaldb
    from vitlab.memory.budget import DEFAULT_FRACTION, available_memory

    spec = FractalDBSpec(classes=args.classes, per_class=args.per_class, size=args.size, seed=args.seed)
    limit = int(DEFAULT_FRACTION * available_memory())
    generate_fractaldb(spec, args.out, format=args.format, workers=args.workers, memory_limit=limit)
    return 0
