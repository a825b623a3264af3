"""Checking every image of a split once, as the dataset is built, in the main process.

Checking up front names each unreadable file exactly once however many DataLoader workers and
epochs follow, and stops a split that is mostly broken before any training time is spent on it.

A source without a validation split is split on its file listing, before any file is checked, so
that the split does not depend on which files decode: evaluation can check only the split it
scores and still get exactly the split the run trained with.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .datasets import EncodedImages, TooManyBadImagesError, Transform
from .images import BadImageError
from .splits import DataSplits, SplitPlan, split_indices

logger = logging.getLogger("vitlab")

EXAMPLES = 3  # unreadable files quoted in the error that stops a split
# check="auto" decodes every image of splits up to this size (cheap next to training on them)
# and reads only headers of larger ones, leaving the rare truncated JPEG to the dataset's fallback.
AUTO_DECODE_LIMIT = 50_000
CHECKS = ("auto", "decode", "header", "none")
SPLITS = ("train", "dev", "val")


def scan_images(
    sources: Sequence[Any], check: Callable[[Any, bool], None], *, mode: str, description: str, max_bad_fraction: float
) -> list[int]:
    """Indices of the sources that `check(source, decode)` accepts; the others are logged once.

    `mode` is one of CHECKS. Raises TooManyBadImagesError as soon as more than `max_bad_fraction`
    of the split is bad.
    """
    if mode not in CHECKS:
        raise ValueError(f"image check must be one of {CHECKS}, got {mode!r}")
    if mode == "none":
        return list(range(len(sources)))
    decode = mode == "decode" or (mode == "auto" and len(sources) <= AUTO_DECODE_LIMIT)
    if mode == "auto" and not decode:
        logger.info(
            "%s: checking the headers of %d images (more than %d to decode up front)",
            description,
            len(sources),
            AUTO_DECODE_LIMIT,
        )
    total = len(sources)
    good: list[int] = []
    bad: list[BadImageError] = []
    progress = tqdm(
        sources, desc=f"checking {description}", unit="img", leave=False, disable=None if total >= 5000 else True
    )
    for index, source in enumerate(progress):
        try:
            check(source, decode)
        except BadImageError as error:
            bad.append(error.with_traceback(None))  # its traceback would keep the callers' frames alive
            logger.warning("skipping unreadable image %s: %s", error.name, error.reason)
            if len(bad) > max_bad_fraction * total:
                progress.close()
                examples = "; ".join(str(e) for e in bad[:EXAMPLES])
                raise TooManyBadImagesError(
                    f"{len(bad)} of the first {index + 1} of {total} images in {description} cannot be "
                    f"decoded, more than {max_bad_fraction:.0%} of the split; e.g. {examples}"
                ) from None
        else:
            good.append(index)
    if bad:
        logger.warning("%d of %d images in %s cannot be decoded and are skipped", len(bad), total, description)
    return good


def finish_splits(
    train: EncodedImages,
    val: EncodedImages | None,
    class_names: list[str],
    *,
    train_transform: Transform,
    eval_transform: Transform,
    plan: SplitPlan,
    check: str,
    check_splits: Collection[str],
) -> DataSplits:
    """Split the listing as `plan` says (when `val` is None it is held out of `train`), then check the
    images of the splits in `check_splits` (the others are left to the dataset's fallback) and set
    the transforms.

    Splits carved from one listing are checked together, as the pool they came from, so that
    `max_bad_fraction` counts against the whole listing as it did before the split.
    """
    unknown = set(check_splits) - set(SPLITS)
    if unknown:
        raise ValueError(f"check_splits must name splits among {SPLITS}, got {sorted(unknown)}")
    held_out = val is None
    if held_out:
        train_idx, val_idx = split_indices(train.labels, plan.val_fraction, plan.seed)
        train, val = train.subset(train_idx, None), train.subset(val_idx, None)
    carved, dev = plan.carve(train)
    # Subsets keep their class: what was carved from encoded images is encoded images.
    assert isinstance(carved, EncodedImages) and (dev is None or isinstance(dev, EncodedImages))
    parts: dict[str, EncodedImages | None] = {"train": carved, "dev": dev, "val": val}
    for group in (SPLITS,) if held_out else (("train", "dev"), ("val",)):
        present = [(name, part) for name in group if name in check_splits and (part := parts[name]) is not None]
        if not present:
            continue
        good = np.asarray(_good_indices(_joined([part for _, part in present]), check), dtype=np.int64)
        start = 0
        for name, part in present:
            end = start + len(part)
            parts[name] = part.subset(good[(good >= start) & (good < end)] - start, None)
            start = end
    train_part, val_part, dev_part = parts["train"], parts["val"], parts["dev"]
    assert train_part is not None and val_part is not None  # val was held out above when the source had none
    train_part.transform, val_part.transform = train_transform, eval_transform
    if dev_part is not None:
        dev_part.transform = eval_transform
    return DataSplits(train_part, val_part, class_names, held_out=held_out, dev=dev_part)


def _joined(parts: list[EncodedImages]) -> EncodedImages:
    """The parts' images one after another, as one dataset (to check them as the pool they came from)."""
    pool = parts[0].subset(range(len(parts[0])), None)
    pool.sources = [source for part in parts for source in part.sources]
    pool.labels = [label for part in parts for label in part.labels]
    return pool


def _good_indices(dataset: EncodedImages, check: str) -> list[int]:
    return scan_images(
        dataset.sources,
        dataset.check,
        mode=check,
        description=dataset.description,
        max_bad_fraction=dataset.max_bad_fraction,
    )
