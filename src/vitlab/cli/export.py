"""`vitlab export`: a checkpoint to ONNX, a torch.export program or the official .npz layout."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from vitlab.export import FORMATS
    from vitlab.export.validate import FP32_TOLERANCE

    parser = subparsers.add_parser(
        "export",
        help="export a checkpoint to ONNX, torch.export (.pt2) or vit_jax .npz, checked against PyTorch",
        description="Export a checkpoint and check the written file against the PyTorch model on sample "
        "inputs (onnxruntime for ONNX); prints the largest logit difference and fails above the tolerance.",
    )
    parser.add_argument("--ckpt", required=True, help="anything vitlab.load reads: folder, file, MODEL:TAG, hf://ORG/NAME")
    parser.add_argument("--format", required=True, choices=FORMATS, help="onnx, export (torch.export .pt2) or npz")
    parser.add_argument("--out", required=True, help="file to write")
    parser.add_argument(
        "--dynamic-batch", action=argparse.BooleanOptionalAction, default=True,
        help="symbolic batch axis (default); --no-dynamic-batch fixes it to --batch-size",
    )
    parser.add_argument("--batch-size", type=int, default=1, help="the fixed batch size with --no-dynamic-batch")
    parser.add_argument("--image-size", type=int, help="export at this resolution (E_pos resampled)")
    parser.add_argument("--tolerance", type=float, default=FP32_TOLERANCE, help="max |logit difference| accepted")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from vitlab.export import export_model
    from vitlab.weights import load

    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {args.batch_size}")
    overrides = {"image_size": args.image_size} if args.image_size else {}
    model = load(args.ckpt, **overrides)
    path, check = export_model(
        model, args.format, args.out, dynamic_batch=args.dynamic_batch, batch_size=args.batch_size,
        tolerance=args.tolerance,
    )
    height, width = model.config.image_size
    print(f"wrote {path} ({args.format}, input {height}x{width}); {check}")
    return 0
