"""`vitlab analyze`: the paper's Figure 6 and 7 analyses of a checkpoint, as PNGs, JSON and HTML.

Over a dataset: --data SRC (any source `vitlab train` takes), or, for a training run's folder, the
run's own data and validation split (its run.yaml). The validation images stream through a
DataLoader batch by batch (at most --max-images of them, spread over the classes): the mean attention distance over all of
them, it and Attention Rollout averaged per class, and every layer and head of the first image.
With --images, those files instead; with neither and no run.yaml, the first 128 validation images
of the built-in `digits` source (128 is the number the paper averages the attention distance over).
The first --show images are drawn with their attention maps.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from vitlab.errors import InputError

from . import COMMANDS, add_checkpoint_argument, add_runtime_arguments, with_examples, worker_count

if TYPE_CHECKING:
    from vitlab.model import BiTConfig, ViTConfig

logger = logging.getLogger("vitlab")

DEFAULT_IMAGES = 128


EXAMPLES = (  # the end of --help
    "vitlab analyze --ckpt runs/demo --images img.png --out runs/demo/analysis",
    "vitlab analyze --ckpt B/16:augreg-in21k --images a.jpg b.jpg --out analysis --what rollout,distance",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "analyze",
        **with_examples(*EXAMPLES),
        help=COMMANDS["analyze"].help,
        description="Write the paper's Fig. 6/7 analyses of a checkpoint: PNGs, analysis.json and report.html.",
    )
    add_checkpoint_argument(parser)
    parser.add_argument(
        "--images",
        nargs="+",
        metavar="IMG_OR_DIR",
        help="image files or folders (default: the validation split of --data or of the run)",
    )
    parser.add_argument(
        "--data",
        metavar="SRC",
        help="analyse the validation split of this data source (default: a run folder's own "
        "data, else the first 128 validation images of digits)",
    )
    parser.add_argument("--batch-size", type=int, default=32, metavar="N", help="images per batch (default: 32)")
    parser.add_argument("--workers", type=worker_count(), default=0, help="data-loader worker processes (default: 0)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument(
        "--what",
        default="all",
        help="all, or a comma-separated subset of rollout,distance,posemb,filters; flow (Attention Flow) "
        "and relevance (class relevance) run only when named, e.g. all,flow (default: all)",
    )
    parser.add_argument(
        "--layer", type=int, default=-1, help="layer of the raw attention map, 0-based; -1 is the last (default)"
    )
    parser.add_argument(
        "--head", type=int, default=None, help="head of the raw attention map, 0-based (default: mean over heads)"
    )
    parser.add_argument(
        "--image-size",
        type=int,
        default=None,
        help="analyse at this resolution (E_pos resampled; default: the model's own)",
    )
    parser.add_argument("--show", type=int, default=6, help="images drawn with their maps (default: 6)")
    parser.add_argument(
        "--max-images",
        type=int,
        default=None,
        help=f"images read at most, all used for the attention distance; from a dataset, spread over its "
        f"classes by the run's seed (default: all of a dataset's validation split; {DEFAULT_IMAGES} of digits "
        f"or --images)",
    )
    add_runtime_arguments(parser, precision=False)
    parser.set_defaults(func=run)


def load_images(paths: list[str] | None, transform, limit: int) -> torch.Tensor:
    """(B, 3, H, W) model inputs from the given files, or from digits' validation split."""
    from vitlab.data import BadImageError, load_datasets, read_image
    from vitlab.data.images import image_files

    if not paths:
        logger.info("no --images, --data or run.yaml: the first %d validation images of digits", limit)
        val = load_datasets("digits", transform, transform).val
        return torch.stack([val[i][0] for i in range(min(limit, len(val)))])
    images = []
    for path in image_files(paths)[:limit]:
        try:
            images.append(transform(read_image(path)))
        except BadImageError as error:
            logger.warning("skipping %s", error)
    if not images:
        raise InputError(f"--images {' '.join(paths)}: none of the files could be read as an image")
    return torch.stack(images)


def analysed_data(args: argparse.Namespace) -> tuple[str | None, Any, Path | None]:
    """(--data or the run's data source, the run's config, its run.yaml); no source with --images or
    without either."""
    from vitlab.training.run_evaluation import read_run

    if args.images:
        return None, None, None
    run, run_file = read_run(args.ckpt)
    return args.data or (run.data.source if run is not None else None), run, run_file


def dataset_batches(
    args: argparse.Namespace, transform, config: ViTConfig | BiTConfig, source: str, run, run_file: Path | None
):
    """The DataLoader over the validation split of `source` (analysed_data), and its class names."""
    from vitlab.data import load_datasets
    from vitlab.data.splits import take_count
    from vitlab.training.config import TrainConfig
    from vitlab.training.loader import eval_loader
    from vitlab.training.run_evaluation import check_classes, run_split

    base = run or TrainConfig()  # the split a new run would make, for --data without a run
    if run is not None:
        logger.info("analysing the validation split of %s as %s splits it", source, run_file)
    splits = load_datasets(
        source,
        transform,
        transform,
        **run_split(base),
        max_bad_fraction=base.data.max_bad_fraction,
        check_splits=("val",),
    )
    check_classes(config, splits.class_names, args.ckpt, source)
    val = splits.val
    if args.max_images is not None:
        val = take_count(val, args.max_images, base.run.seed, splits.class_names)
    return eval_loader(val, args.batch_size, args.workers), [str(n) for n in splits.class_names]


def check_analysis_memory(args: argparse.Namespace, config: ViTConfig | BiTConfig, on_dataset: bool) -> None:
    """Before any image is decoded: a batch of vitlab.analysis.run.BATCH (--batch-size over --data) with every
    layer's attention kept, beside the input images held at once: all of --images (at most
    --max-images), or a DataLoader's batches."""
    from vitlab.analysis.run import BATCH
    from vitlab.cli import memory_limit
    from vitlab.data.images import image_files
    from vitlab.memory.budget import FLOAT_BYTES, batches_in_flight, check_memory

    height, width = config.image_size
    if on_dataset:
        batch, held = args.batch_size, batches_in_flight(args.batch_size, config.image_size, args.workers)
    else:
        count = min(args.max_images or DEFAULT_IMAGES, len(image_files(args.images)) if args.images else DEFAULT_IMAGES)
        batch, held = BATCH, count * 3 * height * width * FLOAT_BYTES
    check_memory(config, batch, keep_attention=True, limit=memory_limit(args), source=str(args.ckpt), in_flight=held)


def run(args: argparse.Namespace) -> int:
    from vitlab.accel import accelerate
    from vitlab.analysis import analyze, parse_what
    from vitlab.cli import load_checkpoint
    from vitlab.evaluate.predict import eval_transform
    from vitlab.runtime import resolve_device

    what = parse_what(args.what)  # a bad --what fails before the model is loaded
    if args.show < 1 or (args.max_images is not None and args.max_images < 1) or args.batch_size < 1:
        raise InputError(
            f"--show, --max-images and --batch-size must be positive, got {args.show}, "
            f"{args.max_images} and {args.batch_size}"
        )
    if args.images and args.data:
        raise InputError("--images and --data: give one of them")
    device = resolve_device(args.device)
    overrides = {"image_size": args.image_size} if args.image_size else {}
    model = load_checkpoint(args, **overrides)
    source, run_config, run_file = analysed_data(args)
    check_analysis_memory(args, model.config, on_dataset=source is not None)
    model = accelerate(model.to(device).eval())
    transform = eval_transform(model.config)
    dataset = None if source is None else dataset_batches(args, transform, model.config, source, run_config, run_file)
    if dataset is None:
        images = load_images(args.images, transform, args.max_images or DEFAULT_IMAGES)
        result = analyze(model, images, args.out, what=what, layer=args.layer, head=args.head, show=args.show)
    else:
        loader, class_names = dataset
        shown = torch.stack([loader.dataset[i][0] for i in range(min(args.show, len(loader.dataset)))])
        result = analyze(
            model,
            shown,
            args.out,
            what=what,
            layer=args.layer,
            head=args.head,
            show=args.show,
            dataset=loader,
            class_names=class_names,
        )
    for note in result.notes:
        logger.warning(note)
    for figure in result.figures:
        print(f"{figure.title}: {figure.path}")
    print(f"numbers: {result.json_path}")
    print(f"report: {result.html_path}")
    return 0
