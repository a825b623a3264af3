"""`vitlab experiment NAME --data SRC --out DIR`: the paper's comparisons in miniature."""

from __future__ import annotations

import argparse

from vitlab.errors import InputError

from . import COMMANDS, with_examples

NAMES = (
    "data-scaling",
    "posemb",
    "pooling",
    "pretrain-transfer",
    "lr-sweep",
    "self-supervision",
    "axial",
    "shape",
    "compute-cost",
    "compute",
    "sgd-adam",
)
REPORT = "report"  # not an experiment: joins the experiments' outputs into one document


EXAMPLES = (  # the end of --help
    "vitlab experiment data-scaling --data digits --out runs/scaling",
    "vitlab experiment report --runs runs/scaling --out docs/experiments.md",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "experiment",
        **with_examples(*EXAMPLES),
        help=COMMANDS["experiment"].help,
        description="data-scaling: ViT vs BiT ResNet vs hybrid on growing data fractions (Fig. 3); posemb: "
        "position embeddings (Table 8); pooling: class token vs GAP over learning rates (Fig. 9); "
        "pretrain-transfer: FractalDB pre-training vs training from scratch; lr-sweep: the fine-tuning "
        "learning rate picked from Table 4's grid on a dev split of the training set, then trained on "
        "all of it and tested (Appendix B.1.1); self-supervision: masked patch pre-training vs scratch vs "
        "supervised pre-training, fine-tuned on few labels (Sec. 4.6); axial: ViT vs Axial-ViT, accuracy against FLOPs and measured "
        "inference time (Fig. 13); shape: depth, width, MLP and patch size scaled one at a time (Fig. 8); "
        "compute-cost: inference speed and largest batch across input sizes (Fig. 12); compute: accuracy against training FLOPs (Fig. 5); sgd-adam: BiT pre-trained with "
        "SGD vs Adam, then fine-tuned (Table 7). Writes DIR/NAME.md, "
        ".json and .png; budgets are optimiser steps, so results do not depend on the machine. "
        "`vitlab experiment report --runs DIR --out docs/experiments.md` joins every registered "
        "experiment's outputs in DIR into one document.",
    )
    parser.add_argument("name", choices=(*NAMES, REPORT), metavar="NAME", help=", ".join((*NAMES, REPORT)))
    parser.add_argument("--data", help="data source: digits, an ImageFolder root, CIFAR, shards (experiments)")
    parser.add_argument(
        "--out",
        required=True,
        help="output folder (every run's model folder goes to DIR/runs/); for report: the document to write",
    )
    parser.add_argument("--runs", help="report: the --out folder the experiments wrote")
    parser.add_argument(
        "--budget-steps", type=int, help="optimiser steps per run on --data (default: the experiment's)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", help="seeds; results are averaged over them")
    parser.add_argument("--image-size", type=int, default=16, help="pixels (default 16, for digits; 32 for CIFAR)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    add_experiment_options(parser)
    parser.set_defaults(func=run)


def add_experiment_options(parser: argparse.ArgumentParser) -> None:
    """The options that one experiment or a few read, each help naming them."""
    parser.add_argument(
        "--fractions", type=float, nargs="+", help="data-scaling: training-set fractions (default 0.1 0.25 0.5 1)"
    )
    parser.add_argument(
        "--lrs",
        type=float,
        nargs="+",
        help="pooling: learning rates (default 3e-4 1e-3 3e-3 1e-2); lr-sweep: the grid (default Table 4's for --row)",
    )
    parser.add_argument(
        "--row",
        default="pets",
        help="lr-sweep: the Table 4 row whose steps, grid and dev fraction "
        "it uses: imagenet, cifar100, cifar10, pets, flowers, vtab (default pets)",
    )
    parser.add_argument(
        "--ckpt",
        "--init",
        dest="init",
        metavar="CKPT",  # --init: its earlier name
        help="lr-sweep: fine-tune this checkpoint (default: the small ViT from scratch)",
    )
    parser.add_argument(
        "--pretrain-data",
        help="pretrain-transfer: a source to pre-train on (default: FractalDB generated into DIR/fractaldb)",
    )
    parser.add_argument(
        "--pretrain-steps", type=int, help="pretrain-transfer, self-supervision: pre-training steps (default 1000, 500)"
    )
    parser.add_argument("--fractal-classes", type=int, default=100, help="FractalDB categories (default 100)")
    parser.add_argument(
        "--fractal-per-class", type=int, default=100, help="FractalDB images per category (default 100)"
    )
    parser.add_argument("--fractal-size", type=int, default=32, help="FractalDB image side in pixels (default 32)")
    parser.add_argument(
        "--label-fraction",
        type=float,
        help="self-supervision: the share of the labelled training images fine-tuned on (default 0.05)",
    )
    parser.add_argument(
        "--sizes",
        nargs="+",
        metavar="WxL",
        help="axial: width x depth of each ViT / Axial-ViT pair (default 32x2 64x2 64x4)",
    )
    parser.add_argument("--models", nargs="+", help="compute-cost: registry names (default Ti/16 S/16 BiT-R26x1)")
    parser.add_argument(
        "--input-sizes", type=int, nargs="+", help="compute-cost: input sizes in px (default 224 320 448)"
    )
    parser.add_argument(
        "--memory-budget-mib",
        type=float,
        default=128.0,
        help="compute-cost: the memory the largest batch must fit, in MiB (default 128)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="compute-cost: timed rounds, median reported (default 3)")


def run(args: argparse.Namespace) -> int:
    from vitlab.experiments import EXPERIMENTS, Settings, run_experiment

    if args.name == REPORT:
        from vitlab.experiments.document import write_document

        if not args.runs:
            raise InputError("vitlab experiment report needs --runs DIR (the --out folder the experiments wrote)")
        out, absent = write_document(args.runs, args.out, EXPERIMENTS)
        print(
            f"{out}: {len(EXPERIMENTS) - len(absent)} of {len(EXPERIMENTS)} experiments"
            + (f"; not found in {args.runs}: {', '.join(absent)}" if absent else "")
        )
        return 0
    if not args.data:
        raise InputError(f"vitlab experiment {args.name} needs --data (a source such as digits)")

    settings = Settings(
        data=args.data,
        out=args.out,
        budget_steps=args.budget_steps,
        seeds=tuple(args.seeds) if args.seeds else None,
        image_size=args.image_size,
        threads=args.threads,
        fractions=tuple(args.fractions) if args.fractions else None,
        lrs=tuple(args.lrs) if args.lrs else None,
        pretrain_data=args.pretrain_data,
        pretrain_steps=args.pretrain_steps,
        fractal_classes=args.fractal_classes,
        fractal_per_class=args.fractal_per_class,
        fractal_size=args.fractal_size,
        row=args.row,
        init=args.init,
        label_fraction=args.label_fraction,
        sizes=tuple(args.sizes) if args.sizes else None,
        models=tuple(args.models) if args.models else None,
        input_sizes=tuple(args.input_sizes) if args.input_sizes else None,
        memory_budget_mib=args.memory_budget_mib,
        rounds=args.rounds,
    )
    _, paths = run_experiment(args.name, settings)
    print(paths["md"].read_text())
    return 0
