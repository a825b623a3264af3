"""`vitlab analyze`: the paper's Figure 6 and 7 analyses of a checkpoint, as PNGs, JSON and HTML.

Without --images the first 128 validation images of the built-in `digits` source are used (128 is
the number of images the paper averages the mean attention distance over); the first --show of
them are drawn with their attention maps.
"""

from __future__ import annotations

import argparse
import logging

import torch

from . import DEVICE_HELP, add_checkpoint_argument, add_runtime_arguments

logger = logging.getLogger("vitlab")

DEFAULT_IMAGES = 128


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "analyze",
        help="attention rollout, mean attention distance, position-embedding similarity, embedding filters",
        description="Write the paper's Fig. 6/7 analyses of a checkpoint: PNGs, analysis.json and report.html.",
    )
    add_checkpoint_argument(parser)
    parser.add_argument("--images", nargs="+", metavar="IMG_OR_DIR",
                        help="image files or folders (default: the first 128 validation images of digits)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--what", default="all",
                        help="all, or a comma-separated subset of rollout,distance,posemb,filters; flow (Attention Flow) "
                             "and relevance (class relevance) run only when named, e.g. all,flow (default: all)")
    parser.add_argument("--layer", type=int, default=-1,
                        help="layer of the raw attention map, 0-based; -1 is the last (default)")
    parser.add_argument("--head", type=int, default=None,
                        help="head of the raw attention map, 0-based (default: mean over heads)")
    parser.add_argument("--image-size", type=int, default=None,
                        help="analyse at this resolution (E_pos resampled; default: the model's own)")
    parser.add_argument("--show", type=int, default=6, help="images drawn with their maps (default: 6)")
    parser.add_argument("--max-images", type=int, default=DEFAULT_IMAGES,
                        help=f"images read at most, all used for the attention distance (default: {DEFAULT_IMAGES})")
    add_runtime_arguments(parser, device_help=DEVICE_HELP, precision=False)
    parser.set_defaults(func=run)


def load_images(paths: list[str] | None, transform, limit: int) -> torch.Tensor:
    """(B, 3, H, W) model inputs from the given files, or from digits' validation split."""
    from vitlab.data import BadImageError, load_datasets, read_image
    from vitlab.data.images import image_files

    if not paths:
        val = load_datasets("digits", transform, transform).val
        return torch.stack([val[i][0] for i in range(min(limit, len(val)))])
    images = []
    for path in image_files(paths)[:limit]:
        try:
            images.append(transform(read_image(path)))
        except BadImageError as error:
            logger.warning("skipping %s", error)
    if not images:
        raise ValueError(f"--images {' '.join(paths)}: none of the files could be read as an image")
    return torch.stack(images)


def run(args: argparse.Namespace) -> int:
    from vitlab.analysis import analyze, parse_what
    from vitlab.evaluate.predict import eval_transform
    from vitlab.model.runtime import resolve_device
    from vitlab.cli import load_checkpoint

    what = parse_what(args.what)  # a bad --what fails before the model is loaded
    if args.show < 1 or args.max_images < 1:
        raise ValueError(f"--show and --max-images must be positive, got {args.show} and {args.max_images}")
    device = resolve_device(args.device)
    overrides = {"image_size": args.image_size} if args.image_size else {}
    model = load_checkpoint(args, **overrides).to(device).eval()
    images = load_images(args.images, eval_transform(model.config), args.max_images)
    result = analyze(model, images, args.out, what=what, layer=args.layer, head=args.head, show=args.show)
    for note in result.notes:
        logger.warning(note)
    for figure in result.figures:
        print(f"{figure.title}: {figure.path}")
    print(f"numbers: {result.json_path}")
    print(f"report: {result.html_path}")
    return 0
