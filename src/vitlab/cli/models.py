"""`vitlab models`: the registered variants and their sizes."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("models", help="list the registered ViT variants")
    parser.add_argument("--params", action="store_true", help="also count parameters (builds each model)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from vitlab.model import config_for, create_model, list_models

    for name in list_models():
        config = config_for(name)
        line = (
            f"{name:<6} width {config.dim:>5}  depth {config.depth:>3}  heads {config.num_heads:>3}"
            f"  mlp {config.mlp_dim:>5}"
        )
        if args.params:
            with __import__("torch").device("meta"):
                model = create_model(name)
            line += f"  params {sum(p.numel() for p in model.parameters()) / 1e6:7.1f}M"
        print(line)
    return 0
