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
JSON, named as the run's own summary.json: top-1/top-5 and loss, the expected calibration error (metrics.ece, 15 bins as
Guo et al. 2017), the accuracy of each class (per_class), and with --real-labels real.json the
ImageNet-ReaL top-1 (real); confusion.json, confusion.png, reliability.png (the reliability diagram)
and classification_report.txt (precision, recall and F1 per class, also under classification_report)
and misclassified.png (the surest mistakes) are written beside it, and the console names each file.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from vitlab.config_fields import SEED_RANGE
from vitlab.training.run_evaluation import SPLITS

from . import (
    COMMANDS,
    UserError,
    add_checkpoint_argument,
    add_runtime_arguments,
    load_checkpoint,
    memory_limit,
    number,
    with_examples,
    worker_count,
    writable_file,
)

log = logging.getLogger("vitlab")

EVAL_FILE = "eval_summary.json"
EXAMPLES = (  # the end of --help
    "vitlab eval --ckpt runs/demo  # the run's data and validation split; runs/demo/eval_summary.json",
    "vitlab eval --ckpt runs/demo --split train --out train_eval.json",
    "vitlab eval --ckpt B/16:augreg-in21k-ft-in1k --data imagefolder:VAL --split all --image-size 384 "
    "--out in1k.json  # VAL/n01440764/*.JPEG ...: every image",
)


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
    from vitlab.export.onnx_runtime import RUNTIMES

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
    add_split_options(parser)
    parser.add_argument(
        "--real-labels",
        metavar="REAL_JSON",
        help="also score ImageNet-ReaL: real.json of google-research/reassessed-imagenet, one label "
        "list per scored image in sorted file-name order",
    )
    parser.set_defaults(func=run_eval)


def add_split_options(parser: argparse.ArgumentParser) -> None:
    """The flags that decide which images are scored, each defaulting to the run's."""
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


def run_eval(args: argparse.Namespace) -> int:
    from vitlab.training.run_evaluation import SETTING_FLAGS, evaluate_run

    if args.runtime == "onnx" and args.image_size:
        raise UserError(f"--runtime onnx runs {args.ckpt} at its exported size on the CPU: drop --image-size")
    out = Path(args.out) if args.out else (Path(args.ckpt) / EVAL_FILE if Path(args.ckpt).is_dir() else None)
    if out is not None:
        writable_file(out)  # one line now, not a traceback after the evaluation
    if args.runtime == "onnx":
        from vitlab.export import OnnxModel

        model = OnnxModel(args.ckpt)
    else:
        model = load_checkpoint(args, **({"image_size": args.image_size} if args.image_size else {}))
    given = {name: getattr(args, name) for name, (flag, _) in SETTING_FLAGS.items() if flag}
    done = evaluate_run(
        model,
        args.ckpt,
        split=args.split,
        out=out,
        workers=args.workers,
        real_labels=args.real_labels,
        runtime=args.runtime,
        memory_limit=memory_limit(args),
        **given,
    )
    print(done.describe())
    if out is None:
        print("report not written: --ckpt is not a model folder; pass --out FILE")
        return 0
    print(f"written to {out}")
    for name in done.report.get("files", []):
        print(f"written to {out.parent / name}")
    return 0
