"""`vitlab predict`: class probabilities for image files, from a model vitlab loads or an ONNX file.

Files stream through DataLoader workers in batches (vitlab.evaluate.predict_files,
which this command calls), so memory stays the same for ten files or a million; results are printed,
or written as they come to --out (CSV or JSON lines), which a rerun resumes.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from . import COMMANDS, add_checkpoint_argument, add_runtime_arguments, with_examples, worker_count

log = logging.getLogger("vitlab")

EXAMPLES = (  # the end of --help
    "vitlab predict --ckpt runs/demo img.png",
    "vitlab predict --ckpt runs/demo photos/ --topk 3 --json",
    "vitlab predict --ckpt B/16:augreg-in21k-ft-in1k photos/ --out top5.csv --features features.npy",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    from vitlab.evaluate.stream import FAST_CHOICES, FAST_MIN_IMAGES

    predict = subparsers.add_parser("predict", help=COMMANDS["predict"].help, **with_examples(*EXAMPLES))
    add_checkpoint_argument(predict)
    predict.add_argument("images", nargs="+", metavar="IMAGE_OR_DIR", help="image files or folders of them")
    predict.add_argument(
        "--topk", type=int, default=5, metavar="K", help="classes shown per image (default 5; at most the model's)"
    )
    predict.add_argument("--json", action="store_true", help="print JSON instead of text")
    predict.add_argument(
        "--runtime",
        choices=("torch", "onnx"),
        default="torch",
        help="onnx: --ckpt is a file from `vitlab export --format onnx`, run by onnxruntime",
    )
    predict.add_argument("--batch-size", type=int, default=64, metavar="N", help="images per batch (default: 64)")
    predict.add_argument(
        "--workers",
        type=worker_count(),
        metavar="N",
        help="decoding worker processes (default: the CPUs less one, at most 8)",
    )
    predict.add_argument(
        "--out",
        metavar="FILE",
        help="write results as they come to FILE.csv or FILE.jsonl instead of printing them; "
        "rerun with the same --out to resume",
    )
    predict.add_argument(
        "--raw-csv",
        action="store_true",
        help="write --out CSV cells as they are; by default a cell starting with = + - @ (or a quote) gets a "
        "leading quote, so that a spreadsheet shows it as text instead of running it as a formula",
    )
    predict.add_argument(
        "--features",
        metavar="FILE.npy",
        help="also the pre-logits features, a row per file (needs --out); a feature extractor (num_classes=0) "
        "writes these alone",
    )
    predict.add_argument(
        "--fast",
        choices=FAST_CHOICES,
        default="auto",
        help="optimize_for_inference's compiled path; auto: for bf16/fp16 over at least "
        f"{FAST_MIN_IMAGES} images (default auto)",
    )
    predict.add_argument(
        "--draft",
        action="store_true",
        help="decode JPEGs at a reduced scale still above the model's resize (faster; other pixels than "
        "`vitlab eval` sees)",
    )
    add_runtime_arguments(predict)
    predict.set_defaults(func=run_predict)


def _load_for_inference(args: argparse.Namespace, workers: int, **overrides):
    from vitlab.cli import load_checkpoint, memory_limit
    from vitlab.memory.budget import batches_in_flight, check_memory
    from vitlab.runtime import resolve_device, resolve_precision

    device = resolve_device(args.device)
    precision = resolve_precision(args.precision, device)
    model = load_checkpoint(args, **overrides)
    in_flight = batches_in_flight(args.batch_size, model.config.image_size, workers, value_bytes=1)  # uint8 batches
    check_memory(model.config, args.batch_size, limit=memory_limit(args), source=str(args.ckpt), in_flight=in_flight)
    return model.to(device).eval(), device, precision


def _check_arguments(args: argparse.Namespace) -> None:
    from vitlab.cli import UserError, writable_file
    from vitlab.evaluate.prediction_files import SUFFIXES

    if args.topk < 1:
        raise UserError(f"--topk must be >= 1, got {args.topk}")
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.out and Path(args.out).suffix not in SUFFIXES:
        raise UserError(f"--out {args.out}: the file name must end in {' or '.join(SUFFIXES)}")
    if args.features and not args.out:
        raise UserError("--features needs --out: its rows follow the rows of that file")
    if args.features and Path(args.features).suffix != ".npy":
        raise UserError(f"--features {args.features}: the file name must end in .npy")
    if args.features and args.runtime == "onnx":
        raise UserError("--features needs --runtime torch: the exported ONNX graph gives logits only")
    for flag, path in (("--out", args.out), ("--features", args.features)):  # one line, before any work
        if path:
            writable_file(path, flag)


def classes_shown(args: argparse.Namespace, config) -> int:
    """--topk, at most the model's classes (said where fewer); 0 for a feature extractor, whose run
    writes its representation to --features, the rows of --out listing the files."""
    from vitlab.cli import UserError

    if config.num_classes == 0:
        if not args.features:
            raise UserError(
                f"{args.ckpt} is a feature extractor (num_classes=0): it has no classes to predict; pass --out "
                f"and --features FILE.npy to write its {config.feature_dim}-wide representation of each file"
            )
        log.info("%s is a feature extractor (num_classes=0): --out lists the files, --features holds them", args.ckpt)
        return 0
    if args.topk > config.num_classes:
        log.info("--topk %d: %s has %d classes, each shown", args.topk, args.ckpt, config.num_classes)
        return config.num_classes
    return args.topk


def _model_to_run(args: argparse.Namespace):
    """(model, device, precision or None, fingerprint or None) of --ckpt: an ONNX file runs as a vitlab
    model on the CPU, with the preprocessing and top-k of one, and is known by its bytes."""
    import torch

    from vitlab.data.stream import default_workers
    from vitlab.evaluate.prediction_files import file_fingerprint

    if args.runtime == "onnx":
        from vitlab.export import OnnxModel

        return OnnxModel(args.ckpt), torch.device("cpu"), None, file_fingerprint(args.ckpt)
    workers = default_workers() if args.workers is None else args.workers
    return (*_load_for_inference(args, workers), None)


def run_predict(args: argparse.Namespace) -> int:
    from vitlab.evaluate.file_prediction import predict_files

    _check_arguments(args)
    model, device, precision, fingerprint = _model_to_run(args)
    printed = Printed(args.json, to_stdout=not args.out)
    try:
        done = predict_files(
            model,
            args.images,
            topk=classes_shown(args, model.config),
            out=args.out,
            features=args.features,
            batch_size=args.batch_size,
            workers=args.workers,
            device=device,
            precision=precision,
            fast=args.fast,
            draft=args.draft,
            runtime=args.runtime,
            raw_csv=args.raw_csv,
            fingerprint=fingerprint,
            on_rows=printed.write,
        )
    finally:  # --json: what was printed stays one JSON list
        printed.close()
    if args.out:
        print(f"{done.files} files: {done.predicted} predicted, {done.skipped} skipped; written to {args.out}")
    return 0 if done.skipped == 0 else 1


class Printed:
    """Results as they come: each skipped file named on stderr, and, unless written to --out, a line
    per image on stdout, or (--json) one JSON list written an element at a time so that memory does
    not grow with the file count."""

    def __init__(self, as_json: bool, to_stdout: bool = True) -> None:
        self.as_json = as_json
        self.to_stdout = to_stdout
        self.started = False

    def write(self, rows) -> None:
        for path, result in rows:
            if result.skipped:
                print(f"vitlab predict: skipping {result.skipped}", file=sys.stderr)
            if result.top is None or not self.to_stdout:
                continue
            if self.as_json:
                row = {"path": path, "top": [{"label": name, "prob": prob} for name, prob in result.top]}
                print(",\n" if self.started else "[\n", json.dumps(row), sep="", end="", flush=True)
                self.started = True
            else:
                print(f"{path}: " + ", ".join(f"{name} ({prob:.3f})" for name, prob in result.top), flush=True)

    def close(self) -> None:
        if self.as_json and self.started:
            print("\n]")
