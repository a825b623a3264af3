"""`vitlab predict`: class probabilities for image files, from a model vitlab loads or an ONNX file."""

from __future__ import annotations

import argparse
import json
import sys

from . import add_checkpoint_argument, add_runtime_arguments, with_examples

EXAMPLES = (  # the end of --help
    "vitlab predict --ckpt runs/demo img.png",
    "vitlab predict --ckpt runs/demo photos/ --topk 3 --json",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    predict = subparsers.add_parser("predict", help="class probabilities for image files", **with_examples(*EXAMPLES))
    add_checkpoint_argument(predict)
    predict.add_argument("images", nargs="+", metavar="IMAGE_OR_DIR", help="image files or folders of them")
    predict.add_argument("--topk", type=int, default=5, metavar="K", help="classes shown per image (default 5)")
    predict.add_argument("--json", action="store_true", help="print JSON instead of text")
    predict.add_argument(
        "--runtime",
        choices=("torch", "onnx"),
        default="torch",
        help="onnx: --ckpt is a file from `vitlab export --format onnx`, run by onnxruntime",
    )
    predict.add_argument("--batch-size", type=int, default=64, metavar="N")
    add_runtime_arguments(predict)
    predict.set_defaults(func=run_predict)


def _load_for_inference(args: argparse.Namespace, **overrides):
    from vitlab.cli import load_checkpoint, memory_limit
    from vitlab.model.budget import check_memory
    from vitlab.model.runtime import resolve_device, resolve_precision

    device = resolve_device(args.device)
    precision = resolve_precision(args.precision, device)
    model = load_checkpoint(args, **overrides)
    check_memory(model.config, args.batch_size, limit=memory_limit(args), source=str(args.ckpt))  # this command's batch
    return model.to(device).eval(), device, precision


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
        predictions = predict_images(
            model, images, topk=args.topk, batch_size=args.batch_size, autocast=precision.autocast
        )
    if args.json:
        print(
            json.dumps(
                [
                    {"path": str(path), "top": [{"label": label, "prob": prob} for label, prob in p.top]}
                    for path, p in zip(readable, predictions)
                ],
                indent=2,
            )
        )
    else:
        for path, prediction in zip(readable, predictions):
            print(f"{path}: " + ", ".join(f"{label} ({prob:.3f})" for label, prob in prediction.top))
    return 0 if len(readable) == len(files) else 1
