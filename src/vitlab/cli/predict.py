"""`vitlab predict`: class probabilities for image files, from a model vitlab loads or an ONNX file.

Files stream through DataLoader workers in batches (vitlab.data.stream), so memory stays the same
for ten files or a million; results are printed, or written as they come to --out (CSV or JSON
lines), which a rerun resumes (vitlab.evaluate.prediction_files).
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
    predict.add_argument("--batch-size", type=int, default=64, metavar="N")
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
    from vitlab.model.runtime import resolve_device, resolve_precision

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


def run_predict(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from vitlab.cli import UserError
    from vitlab.data.images import image_files
    from vitlab.data.stream import ImageFiles, PathTable, default_workers, file_loader
    from vitlab.data.transforms import eval_resize, eval_transform
    from vitlab.evaluate.prediction_files import (
        CSV_CELLS,
        FeatureFile,
        PredictionWriter,
        file_fingerprint,
        model_fingerprint,
    )
    from vitlab.evaluate.stream import StreamPredictor, choose_path
    from vitlab.progress import progress

    _check_arguments(args)
    workers = default_workers() if args.workers is None else args.workers
    paths = PathTable(str(path) for path in image_files(args.images))
    if args.runtime == "onnx":  # same preprocessing and top-k: the ONNX file runs as a vitlab model
        from vitlab.export import OnnxModel
        from vitlab.model.runtime import resolve_precision

        model = OnnxModel(args.ckpt)
        device, precision = torch.device("cpu"), resolve_precision("fp32", torch.device("cpu"))
        fingerprint = file_fingerprint(args.ckpt)
    else:
        model, device, precision = _load_for_inference(args, workers)
        fingerprint = model_fingerprint(model)
    config = model.config
    topk = classes_shown(args, config)
    options = {
        "images": list(args.images),
        "model": fingerprint,
        "runtime": args.runtime,
        "precision": precision.name,
        "topk": topk,
        "image_size": list(config.image_size),
        "preprocessing": [
            list(config.preprocessing.mean),
            list(config.preprocessing.std),
            config.preprocessing.crop_pct,
            config.preprocessing.interpolation,
        ],
        "draft": args.draft,
        CSV_CELLS: ("raw" if args.raw_csv else "escaped") if Path(args.out or "").suffix == ".csv" else None,
        "features": args.features,
        # --features rows follow the file list's order: a resume must list the same files, in order
        "file_list": paths.fingerprint() if args.features else None,
    }
    writer = PredictionWriter(Path(args.out), options, topk) if args.out else None
    done = writer.done if writer else set()
    todo = np.fromiter((i for i, path in enumerate(paths) if path not in done), dtype=np.int64)
    if writer and done:
        log.info(
            "%s: %d of %d files already predicted, %d to go", args.out, len(paths) - len(todo), len(paths), len(todo)
        )
    features = None
    if args.features:
        try:
            features = FeatureFile(Path(args.features), len(paths), config.feature_dim, done=len(done))
        except BaseException:
            if writer is not None:
                writer.close()  # frees --out for the rerun this error asks for
            raise

    fast, why = (
        (False, "onnxruntime") if args.runtime == "onnx" else choose_path(args.fast, precision.name, device, len(todo))
    )
    log.info(
        "predicting %d images on %s in %s, %s path (%s)",
        len(todo),
        device.type,
        precision.name,
        "fast" if fast else "eager",
        why,
    )
    predictor = StreamPredictor(
        model,
        topk=topk,
        device=device,
        dtype=precision.dtype or torch.float32,
        autocast=precision.autocast,
        fast=fast,
        features=features is not None,
        batch_size=args.batch_size,
    )
    draft = max(eval_resize(config.image_size, config.preprocessing.crop_pct)) if args.draft else None
    transform = eval_transform(config.image_size, config.preprocessing, normalize=False)
    dataset = ImageFiles(paths, transform, positions=todo, draft=draft)
    loader = file_loader(dataset, args.batch_size, workers if len(todo) > args.batch_size else 0, device.type == "cuda")
    output = writer or Printed(args.json)
    predicted = skipped = 0
    try:
        for results in predictor.stream(progress(loader, "predict", total=len(loader))):
            rows = [(paths[result.position], result) for result in results]
            for result in results:
                if result.skipped:
                    print(f"vitlab predict: skipping {result.skipped}", file=sys.stderr)
            skipped += sum(result.skipped is not None for result in results)
            predicted += sum(result.skipped is None for result in results)
            if features is not None:
                features.write(results)  # before the rows: a row written has its features
            output.write(rows)
    finally:  # what was written stays readable: for the next run to resume, or (--json) as JSON
        output.close()
        if features is not None:
            features.close()
    skipped += writer.skipped_before if writer else 0
    if not predicted and len(done) == (writer.skipped_before if writer else 0):
        raise UserError("none of the images can be read")
    if writer is not None:
        print(f"{len(paths)} files: {len(paths) - skipped} predicted, {skipped} skipped; written to {args.out}")
    return 0 if skipped == 0 else 1


class Printed:
    """Results on stdout as they come: a line per image, or (--json) one JSON list, written an element
    at a time so that memory does not grow with the file count."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.started = False

    def write(self, rows) -> None:
        for path, result in rows:
            if result.top is None:
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
