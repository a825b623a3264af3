"""Checking every image of a split once, as the dataset is built, in the main process.

Checking up front names each unreadable file exactly once however many DataLoader workers and
epochs follow, and stops a split that is mostly broken before any training time is spent on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from tqdm.auto import tqdm

from .datasets import TooManyBadImagesError
from .images import BadImageError

logger = logging.getLogger("vitlab")

EXAMPLES = 3  # unreadable files quoted in the error that stops a split
# check="auto" decodes every image of splits up to this size (~1-2 ms a photo, so about a minute)
# and reads only headers of larger ones, leaving the rare truncated JPEG to the dataset's fallback.
AUTO_DECODE_LIMIT = 50_000
CHECKS = ("auto", "decode", "header", "none")


def scan_images(sources: Sequence[Any], check: Callable[[Any, bool], None], *, mode: str,
                description: str, max_bad_fraction: float) -> list[int]:
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
        logger.info("%s: checking the headers of %d images (more than %d to decode up front)",
                    description, len(sources), AUTO_DECODE_LIMIT)
    total = len(sources)
    good: list[int] = []
    bad: list[BadImageError] = []
    progress = tqdm(sources, desc=f"checking {description}", unit="img", leave=False,
                    disable=None if total >= 5000 else True)
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
