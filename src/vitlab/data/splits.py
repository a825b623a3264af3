"""The train/val pair every source returns, and the seeded stratified split used when a source has no
validation set of its own."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from sklearn.model_selection import train_test_split

from .datasets import LabelledImages, Transform

logger = logging.getLogger("vitlab")


@dataclass
class DataSplits:
    """A training and a validation dataset of (image tensor (C, H, W), int label), and the class names.

    `held_out`: the source has no validation split of its own, so val was held out of the training
    images by a seeded fraction (and evaluation must repeat the run's seed and fraction).
    `dev`: a development split carved from the training split (SplitPlan.dev_fraction), or None.
    """

    train: LabelledImages
    val: LabelledImages
    class_names: list[str]
    held_out: bool = False
    dev: LabelledImages | None = None

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def fingerprints(self) -> dict[str, str | None]:
        """The training and validation splits in a few words each, which a resumed run must find again."""
        return {
            part: dataset.fingerprint() if isinstance(dataset, LabelledImages) else None
            for part, dataset in (("train", self.train), ("val", self.val))
        }


@dataclass(frozen=True)
class SplitPlan:
    """Which images go where, decided on the listing of a source before any image is decoded, so that
    evaluation can rebuild a run's splits exactly: val held out by `val_fraction` when the source has
    no validation split, then a dev split of `dev_fraction` (paper Appendix B.1.1; "stratified" or
    Keras' "last"), then `train_fraction` of the rest kept (Fig. 3's data scaling); all seeded by `seed`."""

    val_fraction: float = 0.2
    seed: int = 0
    train_fraction: float = 1.0
    dev_fraction: float | None = None
    dev_split: str = "stratified"

    def carve(
        self,
        train: LabelledImages,
    ) -> tuple[LabelledImages, LabelledImages | None]:
        """(training images, dev split or None) from a source's training split."""
        dev = None
        if self.dev_fraction:
            train, dev = hold_out(train, self.dev_fraction, self.seed, self.dev_split, None)
        if self.train_fraction < 1.0:
            train = take_fraction(train, self.train_fraction, self.seed)
        return train, dev


def split_indices(
    labels: Sequence[int] | np.ndarray,
    val_fraction: float,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (train, val) indices; stratified by label when every class has at least two samples."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1) for a source without a validation split, got {val_fraction}")
    label_array = np.asarray(labels)
    indices = np.arange(len(label_array))
    try:
        train, val = train_test_split(indices, test_size=val_fraction, random_state=seed, stratify=label_array)
    except ValueError:
        # Too few samples per class (or in val) to stratify: a plain seeded shuffle still splits.
        logger.info("too few images per class to stratify the validation split; splitting at random")
        try:
            train, val = train_test_split(indices, test_size=val_fraction, random_state=seed)
        except ValueError as error:
            raise ValueError(
                f"cannot split {len(label_array)} images with val_fraction {val_fraction}: {error}"
            ) from None
    return np.sort(train), np.sort(val)


def take_fraction(dataset: LabelledImages, fraction: float, seed: int) -> LabelledImages:
    """A class-balanced `fraction` of a dataset with `labels` and `subset` (every vitlab source), its
    transform kept. Each class is shuffled by default_rng(seed) and its first round(fraction * n) (at
    least one) images kept, so for one seed a smaller fraction is part of every larger one."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    labels = np.asarray(dataset.labels)
    order = np.random.default_rng(seed).permutation(len(labels))
    keep = []
    for label in np.unique(labels):
        members = order[labels[order] == label]
        keep.append(members[: max(1, round(fraction * len(members)))])
    return dataset.subset(np.sort(np.concatenate(keep)), dataset.transform)


def take_count(
    dataset: LabelledImages, count: int, seed: int = 0, class_names: Sequence[str] | None = None
) -> LabelledImages:
    """`count` images of a dataset with `labels` and `subset`, spread over the classes in proportion to
    their sizes (scikit-learn's stratified split, seeded), so that a sample of a class-ordered split
    still shows every class; a seeded plain sample when there are fewer images than classes (or a
    class of one). Logs how many of each class were taken, and keeps the images' stored order."""
    labels = np.asarray(dataset.labels)
    if count >= len(labels):
        return dataset
    indices = np.arange(len(labels))
    try:
        _, taken = train_test_split(indices, test_size=count, random_state=seed, stratify=labels)
    except ValueError:
        logger.info("%d images are too few to take from every class; taking them at random (seed %d)", count, seed)
        _, taken = train_test_split(indices, test_size=count, random_state=seed)
    taken = np.sort(taken)
    names = list(class_names) if class_names is not None else [str(label) for label in range(labels.max() + 1)]
    classes, counts = np.unique(labels[taken], return_counts=True)
    missing = len(np.unique(labels)) - len(classes)
    if len(classes) <= 20:
        each = ", ".join(f"{names[c]} {n}" for c, n in zip(classes, counts, strict=True))
    else:
        each = f"{counts.min()} to {counts.max()} per class"
    logger.info(
        "%d of %d images, spread over the classes (seed %d): %s%s",
        count,
        len(labels),
        seed,
        each,
        f"; {missing} classes have none" if missing else "",
    )
    return dataset.subset(taken, dataset.transform)


HoldOut = Literal["stratified", "last"]  # the ways hold_out takes a dev split; a run's data.dev_split


def hold_out(
    dataset: LabelledImages, fraction: float, seed: int, how: str = "stratified", transform: Transform = None
) -> tuple[LabelledImages, LabelledImages]:
    """(rest, held out): a development split carved from a training split with `labels` and `subset`.

    "stratified": a seeded class-balanced `fraction` (the paper's Appendix B.1.1 sub-splits).
    "last": the last images in their stored order, as Keras' `validation_split` takes them
    (the first floor(n * (1 - fraction)) are kept for training). The held-out part gets `transform`.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"dev fraction must be in (0, 1), got {fraction}")
    if how == "last":
        split_at = int(np.floor(len(dataset) * (1.0 - fraction)))
        rest, held = np.arange(split_at), np.arange(split_at, len(dataset))
    elif how == "stratified":
        rest, held = split_indices(dataset.labels, fraction, seed)
    else:
        raise ValueError(f"unknown hold-out {how!r}; choose 'stratified' or 'last'")
    if len(rest) == 0 or len(held) == 0:
        raise ValueError(f"a dev fraction of {fraction} of {len(dataset)} images leaves an empty split")
    return dataset.subset(rest, dataset.transform), dataset.subset(held, transform)
