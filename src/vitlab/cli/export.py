"""`vitlab export`: a checkpoint to ONNX, a torch.export program, the official .npz layout, or a
folder timm or transformers loads."""

from __future__ import annotations

import argparse

from vitlab.errors import InputError

from . import COMMANDS, add_checkpoint_argument, with_examples

EXAMPLES = (  # the end of --help
    "vitlab export --ckpt runs/demo --format onnx --out demo.onnx",
    "vitlab export --ckpt runs/demo --format hf --out demo-hf",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    from vitlab.export import FORMATS, INT8_TOLERANCE, QUANTIZATIONS
    from vitlab.export.validate import FP32_TOLERANCE

    parser = subparsers.add_parser(
        "export",
        **with_examples(*EXAMPLES),
        help=COMMANDS["export"].help,
        description="Export a checkpoint and check the written file against the PyTorch model on sample "
        "inputs (onnxruntime for ONNX); prints the largest logit difference and fails above the tolerance.",
    )
    add_checkpoint_argument(parser)
    parser.add_argument(
        "--format",
        required=True,
        choices=FORMATS,
        help="onnx, export (torch.export .pt2), npz, timm (a folder for timm.create_model('local-dir:DIR')) "
        "or hf (a folder for transformers' from_pretrained and pipeline)",
    )
    parser.add_argument(
        "--out", required=True, help="file to write (a folder for timm and hf); never through a symbolic link"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --out (and --quantize's file); without it an existing one is refused",
    )
    parser.add_argument(
        "--dynamic-batch",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="symbolic batch axis (default); --no-dynamic-batch fixes it to --batch-size",
    )
    parser.add_argument("--batch-size", type=int, default=1, help="the fixed batch size with --no-dynamic-batch")
    parser.add_argument("--image-size", type=int, help="export at this resolution (E_pos resampled)")
    parser.add_argument("--tolerance", type=float, default=FP32_TOLERANCE, help="max |logit difference| accepted")
    parser.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        help="onnx only: also write OUT's int8 copy (vit.onnx -> vit.int8.onnx, onnxruntime's dynamic quantization "
        f"of the linear layers), checked within {INT8_TOLERANCE:g} x the largest PyTorch logit",
    )
    parser.add_argument(
        "--speed", type=int, metavar="BATCH", help="onnx only: also time PyTorch and onnxruntime on CPU at this batch"
    )
    parser.add_argument(
        "--threads", type=int, help="with --speed: intra-op threads of both runtimes (default: torch's)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from vitlab.cli import UserError, load_checkpoint
    from vitlab.export import TracePlan, export_model, quantized_path
    from vitlab.output_files import refuse_existing, staged

    if args.batch_size < 1:
        raise InputError(f"--batch-size must be at least 1, got {args.batch_size}")
    if not args.tolerance >= 0:  # NaN too: no difference is ever within it
        raise InputError(f"--tolerance must be at least 0, got {args.tolerance}")
    if args.speed is not None and (args.format != "onnx" or args.speed < 1):
        raise InputError("--speed BATCH needs --format onnx and a batch of at least 1")
    if args.quantize is not None and args.format != "onnx":
        raise InputError(f"--quantize {args.quantize} needs --format onnx, got --format {args.format}")
    refuse_existing(args.out, "--out", args.overwrite)  # one line before the model loads
    if args.quantize is not None:
        refuse_existing(quantized_path(args.out, args.quantize), "--quantize's output", args.overwrite)
    overrides = {"image_size": args.image_size} if args.image_size else {}
    model = load_checkpoint(args, **overrides)
    try:
        plan = TracePlan(args.dynamic_batch, args.batch_size)
        path, check = export_model(model, args.format, args.out, plan, args.tolerance, overwrite=args.overwrite)
    except ModuleNotFoundError as error:  # onnx, onnxscript, onnxruntime are an optional extra
        raise UserError(
            f"--format {args.format} needs the {error.name} package: pip install 'vitlab[export]'"
        ) from None
    height, width = model.config.image_size
    print(f"wrote {path} ({args.format}, input {height}x{width}); {check}")
    if args.quantize is not None:
        from vitlab.export import export_quantized

        try:
            with staged(quantized_path(path, args.quantize), "--quantize's output", args.overwrite) as staging:
                _, int8_check = export_quantized(model, path, args.quantize, plan, out=staging)
        except ModuleNotFoundError as error:
            raise UserError(f"--quantize needs the {error.name} package: pip install 'vitlab[export]'") from None
        quantized = quantized_path(path, args.quantize)
        print(f"wrote {quantized} (onnx {args.quantize}, input {height}x{width}); {int8_check}")
    if args.speed is not None:
        import torch

        from vitlab.export import OnnxModel
        from vitlab.export.speed import compare_speed

        torch.set_num_threads(args.threads or torch.get_num_threads())
        print(compare_speed(model, OnnxModel(path, threads=torch.get_num_threads()), args.speed))
    return 0
