"""Checking images while they are read, for evaluation: the decode check and the scoring overlap.

An EncodedImages split wrapped in SkippingImages hands an unreadable image back as a gap rather than
raising (or, as EncodedImages does for training, putting the next image in its place, which would
score that one twice); `collate_skipping` drops the gaps from the batch and carries their names.
`SkipLog` takes the batches in the main process, names each skipped file once in the log, stops
the run once more than `max_bad_fraction` of the split is bad, as the up-front check (scan.py) did,
and passes the readable (images, labels) on. On readable data the batches are exactly those of the
plain dataset: the same images, in the same order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch.utils.data import ConcatDataset, Dataset, default_collate

from .datasets import EncodedImages, TooManyBadImagesError
from .images import BadImageError
from .scan import EXAMPLES

logger = logging.getLogger("vitlab")

Sample = tuple[int, Any, int | None, tuple[str, str] | None]  # (index, image, label, (name, reason))


class SkippingImages(Dataset):
    """`images[i]` as (i, image, label, None), or (i, None, None, (name, reason)) when it cannot be decoded."""

    def __init__(self, images: EncodedImages, offset: int = 0) -> None:
        self.images = images
        self.offset = offset  # this part's first index among the scored images (splits scored together)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> Sample:
        images = self.images
        try:
            image = images.read(images.sources[index])
        except BadImageError as error:
            return self.offset + index, None, None, (error.name, error.reason)
        image = images.transform(image) if images.transform else image
        return self.offset + index, image, images.labels[index], None


def collate_skipping(samples: list[Sample]) -> tuple[torch.Tensor | None, torch.Tensor | None, list]:
    """(images, labels) of the readable samples (None, None when there are none) and [(index, name, reason)]."""
    good = [(image, label) for _, image, label, bad in samples if bad is None]
    skipped = [(index, *bad) for index, _, _, bad in samples if bad is not None]
    if not good:
        return None, None, skipped
    images, labels = default_collate(good)
    return images, labels, skipped


class SkipLog:
    """Iterates a loader of collate_skipping batches as (images, labels); `skipped` lists what was left out."""

    def __init__(self, loader: Iterable, total: int, max_bad_fraction: float, description: str) -> None:
        self.loader, self.total = loader, total
        self.max_bad_fraction, self.description = max_bad_fraction, description
        self.skipped: list[tuple[int, str, str]] = []  # (index among the scored images, name, reason)
        self.seen = 0

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for images, labels, skipped in self.loader:
            self.seen += len(skipped) + (0 if labels is None else len(labels))
            for index, name, reason in skipped:
                self.skipped.append((index, name, reason))
                logger.warning("skipping unreadable image %s: %s", name, reason)
            if len(self.skipped) > self.max_bad_fraction * self.total:
                examples = "; ".join(f"{name}: {reason}" for _, name, reason in self.skipped[:EXAMPLES])
                raise TooManyBadImagesError(
                    f"{len(self.skipped)} of the first {self.seen} of {self.total} images in {self.description} "
                    f"cannot be decoded, more than {self.max_bad_fraction:.0%} of the split; e.g. {examples}"
                )
            if images is not None:
                yield images, labels
        if self.skipped:
            logger.warning(
                "%d of %d images in %s cannot be decoded and are skipped",
                len(self.skipped),
                self.total,
                self.description,
            )


def scored_dataset(parts: list[Any]) -> tuple[Any, Callable | None]:
    """The scored parts as one dataset, and the collate function of its batches: encoded images (files,
    shards) are read through SkippingImages, which checks each one as the evaluation reads it (batches
    for SkipLog); decoded arrays (digits, CIFAR) have nothing to check (None: the default collate)."""
    if not all(isinstance(part, EncodedImages) for part in parts):
        return (parts[0] if len(parts) == 1 else ConcatDataset(parts)), None
    offsets = [sum(len(p) for p in parts[:i]) for i in range(len(parts))]
    wrapped = [SkippingImages(part, offset) for part, offset in zip(parts, offsets)]
    return (wrapped[0] if len(wrapped) == 1 else ConcatDataset(wrapped)), collate_skipping
