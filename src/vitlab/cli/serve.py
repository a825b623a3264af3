"""`vitlab serve`: the web demo and JSON endpoint for a checkpoint."""

from __future__ import annotations

import argparse
import dataclasses

from vitlab.config_fields import Range
from vitlab.errors import InputError

from . import COMMANDS, POSITIVE, add_checkpoint_argument, number, with_examples

EXAMPLES = (  # the end of --help
    "vitlab serve --ckpt runs/demo",
    "vitlab serve --ckpt runs/demo --host 0.0.0.0 --port 8080",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        **with_examples(*EXAMPLES),
        help=COMMANDS["serve"].help,
        description="Serve a checkpoint: a Gradio page at / and POST /predict (image bytes in, "
        '{"top": [{"label", "prob"}, ...]} out). Binds to 127.0.0.1 unless --host says otherwise.',
    )
    add_checkpoint_argument(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only)")
    parser.add_argument(
        "--port", type=number(int, Range(1, 65535)), default=7860, help="port to listen on (default 7860, Gradio's)"
    )
    parser.add_argument("--max-upload-mb", type=number(float, POSITIVE), help="largest upload accepted (default 10)")
    parser.add_argument(
        "--max-megapixels", type=number(float, POSITIVE), help="largest image, width x height, decoded (default 40)"
    )
    parser.add_argument("--title", help="page title (default: the model's name)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from vitlab.cli import UserError, load_checkpoint
    from vitlab.serve import ImageClassifier, Limits

    try:
        from vitlab.serve.app import serve
    except ModuleNotFoundError as error:  # gradio, fastapi, uvicorn are an optional extra
        raise UserError(f"vitlab serve needs the {error.name} package: pip install 'vitlab[serve]'") from None

    limits = Limits()
    if args.max_upload_mb is not None:
        limits = dataclasses.replace(limits, max_bytes=int(args.max_upload_mb * 2**20))
    if args.max_megapixels is not None:
        limits = dataclasses.replace(limits, max_pixels=int(args.max_megapixels * 1e6))
    if limits.max_bytes <= 0 or limits.max_pixels <= 0:
        raise InputError("--max-upload-mb and --max-megapixels must be positive")
    model = load_checkpoint(args)
    title = args.title or f"vitlab: {model.config.name or args.ckpt}"
    serve(ImageClassifier(model, limits), title, host=args.host, port=args.port)
    return 0
