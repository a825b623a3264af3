"""`vitlab eval`: top-1 / top-5 of a checkpoint on a split of a data source, split as its run split it.

A run folder's run.yaml decides the split (run.seed, data.val_fraction, data.dev_fraction and
dev_split, data.train_fraction), the bad-image limit, the device, precision and batch size, so that
`vitlab eval --ckpt RUN` on the run's data scores exactly the run's validation images and reports
the accuracy in its summary.json (a run with a dev split: --split dev gives its val_top1, --split val
its test_top1). A flag that differs from the run says so in the log, and a scored image the run
trained on is a warning: found by its bytes where the run recorded its training images' digests as it
started (RUN/train_digests.npy), so under any path, else by path; the report says how many
(trained_images_scored) and how they were found (trained_images_found_by).
Only the scored split's images are checked, as the evaluation reads them (an unreadable one is
skipped, named in the log and in the report's "skipped"; more than the bad-image limit stops it). The report goes to RUN/eval_summary.json (or --out) as
JSON, named as the run's own summary.json (RUN/eval.json, its earlier name, is written with it for
readers of that name): top-1/top-5 and loss, the expected calibration error (metrics.ece, 15 bins as
Guo et al. 2017), the accuracy of each class (per_class), and with --real-labels real.json the
ImageNet-ReaL top-1 (real); confusion.json and confusion.png are written beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path

from vitlab.config_fields import SEED_RANGE

from . import (
    COMMANDS,
    UserError,
    add_checkpoint_argument,
    add_runtime_arguments,
    check_classes,
    load_checkpoint,
    memory_limit,
    number,
    run_split,
    with_examples,
    worker_count,
    writable_file,
)

log = logging.getLogger("vitlab")

EVAL_FILE = "eval_summary.json"
OLD_EVAL_FILE = "eval.json"  # the earlier name of the default report, still written beside it
EXAMPLES = (  # the end of --help
    "vitlab eval --ckpt runs/demo  # the run's data and validation split; runs/demo/eval_summary.json",
    "vitlab eval --ckpt runs/demo --split train --out train_eval.json",
    "vitlab eval --ckpt B/16:augreg-in21k-ft-in1k --data imagefolder:VAL --split all --image-size 384 "
    "--out in1k.json  # VAL/n01440764/*.JPEG ...: every image",
)
SPLITS = ("val", "dev", "train", "all")
DEFAULT_BATCH_SIZE = 64  # without a run.yaml to take the run's evaluation batch from


@dataclasses.dataclass
class EvalSettings:
    """What decides which images are scored and how; each field the run's unless a flag says otherwise."""

    data: str | None
    seed: int
    val_fraction: float
    train_fraction: float
    dev_fraction: float | None
    dev_split: str
    max_bad_fraction: float
    device: str
    precision: str
    batch_size: int


# EvalSettings field -> (its flag or None, the run's TrainConfig key it defaults to)
SETTING_FLAGS = {
    "data": ("--data", "data.source"),
    "seed": ("--seed", "run.seed"),
    "val_fraction": ("--val-fraction", "data.val_fraction"),
    "train_fraction": ("--train-fraction", "data.train_fraction"),
    "dev_fraction": (None, "data.dev_fraction"),
    "dev_split": (None, "data.dev_split"),
    "max_bad_fraction": ("--max-bad-fraction", "data.max_bad_fraction"),
    "device": ("--device", "run.device"),
    "precision": ("--precision", "run.precision"),
    "batch_size": ("--batch-size", "data.eval_batch_size"),
}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help=COMMANDS["eval"].help,
        **with_examples(*EXAMPLES),
        description="Score a checkpoint on a split of a data source. For a run folder, the split, bad-image "
        "limit, device, precision and batch size are the run's (from its run.yaml) unless a flag changes "
        f"them; the JSON report goes to the folder's {EVAL_FILE} or --out.",
    )
    add_checkpoint_argument(parser)
    parser.add_argument("--data", metavar="SRC", help="data source, e.g. digits or an ImageFolder (default: the run's)")
    parser.add_argument("--out", metavar="FILE", help=f"JSON report (default: CKPT/{EVAL_FILE} for a model folder)")
    parser.add_argument(
        "--split",
        choices=SPLITS,
        default="val",
        help="val (default: the source's validation split), dev (the run's data.dev_fraction split "
        "of the training images), train (what the run trained on), or all of them",
    )
    parser.add_argument("--image-size", type=int, help="evaluate at this resolution (E_pos resampled)")
    from vitlab.export.runtime import RUNTIMES

    parser.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default="torch",
        help="onnx: --ckpt is a file from `vitlab export --format onnx` (fp32 or --quantize int8), "
        "run by onnxruntime on the CPU; compare both files' top-1 for int8's accuracy cost",
    )
    parser.add_argument("--batch-size", type=int, metavar="N", help="default: the run's evaluation batch, else 64")
    add_runtime_arguments(
        parser,
        default=None,
        device_help="default: the run's, else auto",
        precision_help="default: the run's, else auto",
    )
    parser.add_argument("--workers", type=worker_count(), default=0, help="data-loader worker processes")
    parser.add_argument("--seed", type=number(int, SEED_RANGE), help="seed of the held-out split (default: the run's)")
    parser.add_argument(
        "--val-fraction",
        type=float,
        metavar="X",
        help="held out as val when the source has no validation split (default: the run's)",
    )
    parser.add_argument(
        "--train-fraction",
        type=float,
        metavar="X",
        help="the class-balanced share of the training split the run used (default: the run's)",
    )
    parser.add_argument(
        "--max-bad-fraction",
        type=float,
        metavar="X",
        help="unreadable images tolerated in the scored split (default: the run's)",
    )
    parser.add_argument(
        "--real-labels",
        metavar="REAL_JSON",
        help="also score ImageNet-ReaL: real.json of google-research/reassessed-imagenet, one label "
        "list per scored image in sorted file-name order",
    )
    parser.set_defaults(func=run_eval)


def read_run(ckpt: str):
    """The TrainConfig of the run that wrote the model folder `ckpt`, and its run.yaml; (None, None) else."""
    from vitlab.train.config import read_run_config
    from vitlab.train.trainer import RUN_FILE

    path = Path(ckpt) / RUN_FILE
    if not path.is_file():
        return None, None
    return read_run_config(path), path


def resolve_settings(args: argparse.Namespace, run, run_file: Path | None) -> EvalSettings:
    """Each setting from its flag, else the run's, else the default of a new run; overrides logged."""
    from vitlab.train.config import TrainConfig, lookup

    base = run or TrainConfig()
    values = {}
    for name, (flag, key) in SETTING_FLAGS.items():
        default = lookup(base, key)
        if name == "data" and run is None:
            default = None  # no guess: the data must be named
        if name == "batch_size":
            default = base.evaluation_batch_size if run is not None else DEFAULT_BATCH_SIZE
        given = getattr(args, name) if flag else None
        if given is None:
            values[name] = default
        else:
            values[name] = given
            if run is not None and given != default:
                log.info("%s %s overrides the run's %s=%s (%s)", flag, given, key, default, run_file)
    settings = EvalSettings(**values)
    if settings.data is None:
        raise UserError(f"--data is needed: {args.ckpt} has no run.yaml naming the data it was trained on")
    if settings.batch_size < 1:
        raise UserError(f"--batch-size must be >= 1, got {settings.batch_size}")
    if not 0.0 <= settings.max_bad_fraction < 1.0:
        raise UserError(f"--max-bad-fraction must be in [0, 1), got {settings.max_bad_fraction}")
    return settings


def run_eval(args: argparse.Namespace) -> int:
    from vitlab.accel import accelerate
    from vitlab.data import load_datasets
    from vitlab.data.skipping import SkipLog, scored_dataset
    from vitlab.evaluate import evaluate
    from vitlab.evaluate.breakdown import PredictionLog
    from vitlab.evaluate.details import write_details
    from vitlab.evaluate.predict import eval_transform
    from vitlab.evaluate.real import match_real_labels, read_real_labels
    from vitlab.memory.budget import batches_in_flight, check_memory
    from vitlab.model.runtime import resolve_device, resolve_precision
    from vitlab.progress import progress
    from vitlab.train.loader import eval_loader
    from vitlab.train.outputs import DIGESTS_FILE
    from vitlab.train.trained_images import trained_images_scored

    run, run_file = read_run(args.ckpt)
    settings = resolve_settings(args, run, run_file)
    if args.split == "dev" and not settings.dev_fraction:
        raise UserError(f"--split dev: {args.ckpt} was not trained with a dev split (data.dev_fraction)")
    if args.runtime == "onnx" and (args.image_size or settings.device not in ("auto", "cpu")):
        raise UserError(
            f"--runtime onnx runs {args.ckpt} at its exported size on the CPU: drop --image-size and "
            f"--device {settings.device}"
        )
    device = resolve_device("cpu" if args.runtime == "onnx" else settings.device)
    precision = resolve_precision(settings.precision, device)
    out = Path(args.out) if args.out else (Path(args.ckpt) / EVAL_FILE if Path(args.ckpt).is_dir() else None)
    if out is not None:
        writable_file(out)  # one line now, not a traceback after the evaluation
    overrides = {"image_size": args.image_size} if args.image_size else {}
    if args.runtime == "onnx":
        from vitlab.export import OnnxModel

        model = OnnxModel(args.ckpt)
    else:
        model = load_checkpoint(args, **overrides)
    real = read_real_labels(args.real_labels, model.config.num_classes) if args.real_labels else None
    in_flight = batches_in_flight(settings.batch_size, model.config.image_size, args.workers)
    check_memory(
        model.config, settings.batch_size, limit=memory_limit(args), source=str(args.ckpt), in_flight=in_flight
    )
    model = model.to(device).eval()
    if args.runtime != "onnx":
        accelerate(model, precision.compute_dtype)
    transform = eval_transform(model.config)
    if settings.dev_fraction and args.split == "val":
        log.info(
            "the run validated on a dev split of %g of its training images (its summary's val_top1; "
            "--split dev); --split val scores the source's validation split, the run's test split "
            "(its summary's test_top1)",
            settings.dev_fraction,
        )
    assert settings.data is not None  # resolve_settings refuses a run without one
    splits = load_datasets(
        settings.data,
        transform,
        transform,
        val_fraction=settings.val_fraction,
        seed=settings.seed,
        train_fraction=settings.train_fraction,
        dev_fraction=settings.dev_fraction,
        dev_split=settings.dev_split,
        max_bad_fraction=settings.max_bad_fraction,
        check_splits=(),  # the scored files are checked as they are read, during the evaluation (SkipLog)
    )
    check_classes(model.config, splits.class_names, args.ckpt, settings.data)
    if splits.held_out and run is None and args.split != "all":  # all: every image, however split
        log.info(
            "%s has no run.yaml: %s's validation images held out with seed %d, val_fraction %g "
            "(pass the training run's --seed and --val-fraction)",
            args.ckpt,
            settings.data,
            settings.seed,
            settings.val_fraction,
        )
    parts = (
        [part for part in (splits.train, splits.dev, splits.val) if part is not None]
        if args.split == "all"
        else [getattr(splits, args.split)]
    )
    scored_keys = [key for part in parts for key in part.sample_keys()]
    overlap, found_by = None, None
    if run is not None and run_file is not None:
        train = run_training_split(run, settings, splits)
        overlap, found_by = trained_images_scored(run_file.parent, run.data.source, parts, train)
    if overlap and found_by == "content":
        log.warning(
            "%d of the %d scored images were in the run's training set (the same bytes as images it trained "
            "on, %s); this is not a validation accuracy",
            overlap,
            len(scored_keys),
            Path(run_file).parent / DIGESTS_FILE,
        )
    elif overlap:
        log.warning(
            "%d of the %d scored images were in the run's training set (%s: seed %d, val_fraction %g, "
            "train_fraction %g); this is not a validation accuracy",
            overlap,
            len(scored_keys),
            run_file,
            run.run.seed,
            run.data.val_fraction,
            run.data.train_fraction,
        )

    label_sets = None
    if real is not None:  # refused before the evaluation, not after it
        label_sets = match_real_labels([Path(key).name for key in scored_keys], real, args.real_labels)

    dataset, collate = scored_dataset(parts)
    loader = eval_loader(dataset, settings.batch_size, args.workers, device.type == "cuda", collate)
    checked = SkipLog(loader, len(dataset), settings.max_bad_fraction, f"{settings.data} {args.split}")
    predictions = PredictionLog()
    result = evaluate(
        model,
        progress(checked if collate else loader, "eval", total=len(loader)),
        device=device,
        autocast=precision.autocast,
        on_batch=predictions,
    )
    if label_sets is not None and checked.skipped:  # the ReaL lists of the images scored
        gaps = {index for index, _, _ in checked.skipped}
        label_sets = [labels for index, labels in enumerate(label_sets) if index not in gaps]
    details = write_details(
        predictions,
        output_names(model.config, splits.class_names),
        out.parent if out is not None else None,
        real=label_sets,
    )
    report = {
        "ckpt": str(args.ckpt),
        "data": settings.data,
        "split": args.split,
        "runtime": args.runtime,
        "image_size": list(model.config.image_size),
        "metrics": {**result.to_dict(), "ece": details.pop("ece")},
        **details,
        "trained_images_scored": overlap,  # null: no run.yaml to tell
        "trained_images_found_by": found_by,  # "content" (the run's train_digests.npy), "path", or null
        "skipped": [{"file": name, "reason": reason} for _, name, reason in checked.skipped],
        "settings": {
            **dataclasses.asdict(settings),
            "precision": precision.name,
            "device": device.type,
            "from": str(run_file) if run_file else None,
        },
    }
    real_words = f"  ReaL top-1 {details['real']['top1']:.4f}" if "real" in details else ""
    print(
        f"{result.describe()}{real_words}  ECE {report['metrics']['ece']:.4f}  ({result.count} images, "
        f"{settings.data} {args.split})"
    )
    if out is None:
        print("report not written: --ckpt is not a model folder; pass --out FILE")
        return 0
    out.write_text(json.dumps(report, indent=2) + "\n")
    if not args.out:
        (out.parent / OLD_EVAL_FILE).write_text(out.read_text())
    print(f"written to {out}")
    return 0


def output_names(config, data_names: list[str]) -> list[str]:
    """A name for each of the model's outputs: its own, else the data's, numbered past the data's classes
    (a model with more outputs than the data has classes can predict one the data lacks)."""
    if config.class_names:
        return [str(n) for n in config.class_names]
    names = [str(n) for n in data_names][: config.num_classes]
    return names + [str(k) for k in range(len(names), config.num_classes)]


def run_training_split(run, settings: EvalSettings, splits):
    """The run's training split as its data lists it now: the evaluation's own where it split the data as
    the run did, else listed again (nothing decoded); None where it cannot be listed."""
    from vitlab.data import load_datasets

    same = (settings.data, settings.seed, settings.val_fraction, settings.train_fraction) == (
        run.data.source,
        run.run.seed,
        run.data.val_fraction,
        run.data.train_fraction,
    )  # dev: always the run's
    if same:
        return splits.train
    try:
        return load_datasets(run.data.source, None, None, **run_split(run), check_splits=()).train
    except (OSError, ValueError) as error:
        log.warning("cannot list the run's training data %s (%s)", run.data.source, error)
        return None
