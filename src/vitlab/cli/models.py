"""`vitlab models`: the registered models, their sizes and which have pretrained weights."""

from __future__ import annotations

import argparse
import itertools

from vitlab.model.registry import FAMILIES

from . import COMMANDS, with_examples

EXAMPLES = (  # the end of --help
    "vitlab models",
    "vitlab models --family bit",
    "vitlab models --filter 'S/*' 'B/*' --pretrained",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("models", help=COMMANDS["models"].help, **with_examples(*EXAMPLES))
    parser.add_argument("--family", choices=(*FAMILIES, "all"), default="all", help="which family to list")
    parser.add_argument(
        "--filter", nargs="+", metavar="GLOB", help="only names matching one of these globs, e.g. 'S/*'"
    )
    parser.add_argument(
        "--pretrained", action="store_true", help="only names with pretrained weights (vitlab weights list)"
    )
    parser.add_argument(
        "--params", action="store_true", help="accepted for old scripts: parameter counts are always shown"
    )
    parser.set_defaults(func=run)


def describe(config) -> str:
    if hasattr(config, "dim"):
        line = f"width {config.dim:>5}  depth {config.depth:>3}  heads {config.num_heads:>3}  mlp {config.mlp_dim:>5}"
        if config.backbone is not None:
            line += f"  backbone stages {tuple(config.backbone.layers)}"
        return line
    return f"ResNetV2 stages {tuple(config.resnet.layers)}" if hasattr(config, "resnet") else type(config).__name__


def run(args: argparse.Namespace) -> int:
    from vitlab.weights.listing import model_rows

    rows = model_rows(args.filter or "", args.family, args.pretrained)
    first = next(rows, None)
    if first is None:
        print("no model matches; vitlab models lists them all")
        return 0
    print(f"{'name':<16} {'params':>8}  {'weights':<7}  config")
    for row in itertools.chain([first], rows):
        weights = f"{len(row.weights)} tag{'s' if len(row.weights) > 1 else ''}" if row.weights else "-"
        print(f"{row.name:<16} {row.parameters / 1e6:>7.1f}M  {weights:<7}  {describe(row.config)}")
    return 0
