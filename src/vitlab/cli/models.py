"""`vitlab models`: the registered models and their sizes."""

from __future__ import annotations

import argparse

from vitlab.model import list_models  # importing vitlab.model registers every family
from vitlab.model.registry import FAMILIES

from . import COMMANDS, with_examples

EXAMPLES = (  # the end of --help
    "vitlab models",
    "vitlab models --family bit",
    "vitlab models --family vit --params",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("models", help=COMMANDS["models"].help, **with_examples(*EXAMPLES))
    parser.add_argument("--family", choices=(*FAMILIES, "all"), default="all", help="which family to list")
    parser.add_argument("--params", action="store_true", help="also count parameters (builds each model)")
    parser.set_defaults(func=run)


def describe(config) -> str:
    if hasattr(config, "dim"):
        line = f"width {config.dim:>5}  depth {config.depth:>3}  heads {config.num_heads:>3}  mlp {config.mlp_dim:>5}"
        if config.backbone is not None:
            line += f"  backbone stages {tuple(config.backbone.layers)}"
        return line
    return f"ResNetV2 stages {tuple(config.resnet.layers)}" if hasattr(config, "resnet") else type(config).__name__


def run(args: argparse.Namespace) -> int:
    import torch

    from vitlab.model import config_for, create_untrained

    for name in list_models(args.family):
        config = config_for(name)
        line = f"{name:<16} {describe(config)}"
        if args.params:
            with torch.device("meta"):
                model = create_untrained(name)
            line += f"  params {sum(p.numel() for p in model.parameters()) / 1e6:7.1f}M"
        print(line)
    return 0
