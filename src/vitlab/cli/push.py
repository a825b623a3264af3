"""`vitlab push RUN REPO_ID`: a run's model folder, with its model card, uploaded to the Hugging Face Hub."""

from __future__ import annotations

import argparse

from . import COMMANDS, add_memory_argument, with_examples

EXAMPLES = (  # the end of --help
    "vitlab push runs/demo my-name/vit-digits",
    "vitlab push runs/demo my-org/vit-digits --private --revision v1 --commit-message 'First run'",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "push",
        help=COMMANDS["push"].help,
        **with_examples(*EXAMPLES),
        description="Upload the model folder vitlab writes (config.json, model.safetensors and a README.md "
        "model card) to a Hub repository, creating it if needed. A finished run's card has its training "
        "summary; an unfinished run gives its newest intact checkpoint. The token is huggingface_hub's "
        "(`hf auth login` or HF_TOKEN).",
    )
    parser.add_argument(
        "run", metavar="RUN", help="a run folder, finished or not, or any checkpoint --ckpt takes (MODEL:TAG, hf://...)"
    )
    parser.add_argument(
        "repo_id", metavar="REPO_ID", help="the Hub repository, ORG/NAME (created if it does not exist)"
    )
    parser.add_argument(
        "--private", action="store_true", help="create the repository private (an existing one is kept)"
    )
    parser.add_argument(
        "--revision", help="the branch to push to, created from the default one if needed (default: main)"
    )
    parser.add_argument("--commit-message", help="the commit's message (default: 'Upload NAME with vitlab')")
    add_memory_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from vitlab.cli import memory_limit
    from vitlab.training.push import push_to_hub

    url = push_to_hub(
        args.run,
        args.repo_id,
        private=args.private or None,
        revision=args.revision,
        commit_message=args.commit_message,
        memory_limit=memory_limit(args),
    )
    print(f"pushed {args.run} to {args.repo_id}: {url}")
    return 0
