"""A `torch.utils.data.Dataset` of (image, label) given to `vitlab.train(dataset=...)` as the run's data.

Its items are PIL images, uint8 arrays (H, W[, 3]) or image tensors (C, H, W) with C 1 or 3, uint8 or
float in 0..1 (torchvision's `ToTensor` range: normalising is the model's preprocessing, not the
dataset's), and integer labels 0..K-1. The labels are read from `dataset.targets` when it has one
per item (torchvision's datasets), else from each item once; the class names from `dataset.classes`,
else 0..K-1, logged. Without a validation dataset, one is held out by the run's seeded stratified
fraction, as from a folder of class folders.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image

from .datasets import Indices, LabelledImages, Transform
from .splits import DataSplits, SplitPlan, split_indices

logger = logging.getLogger("vitlab")


def as_rgb(image: Any, where: str) -> Image.Image:
    """An RGB PIL image of a dataset item's image; ValueError naming the item when it is none."""
    if isinstance(image, Image.Image):
        return image if image.mode == "RGB" else image.convert("RGB")
    if isinstance(image, np.ndarray):
        image = torch.from_numpy(image).permute(2, 0, 1) if image.ndim == 3 else torch.from_numpy(image)[None]
    if not isinstance(image, torch.Tensor):
        raise ValueError(f"{where}: the image is a {type(image).__name__}, not a PIL image, array or tensor")
    if image.ndim == 2:
        image = image[None]
    if image.ndim != 3 or image.shape[0] not in (1, 3):
        raise ValueError(f"{where}: an image tensor is (C, H, W) with C 1 or 3, not {tuple(image.shape)}")
    if image.is_floating_point():
        low, high = float(image.min()), float(image.max())
        if low < 0.0 or high > 1.0:
            raise ValueError(
                f"{where}: float pixels in {low:.3g}..{high:.3g}, not 0..1; give the dataset unnormalised "
                "images (the model's preprocessing normalises them)"
            )
        image = (image * 255).round()
    elif image.dtype != torch.uint8:
        raise ValueError(f"{where}: {image.dtype} pixels; images are uint8, or float in 0..1")
    pixels = image.to(torch.uint8).expand(3, -1, -1).permute(1, 2, 0).contiguous().numpy()
    return Image.fromarray(pixels, "RGB")


class GivenImages(LabelledImages):
    """The items `rows` of a dataset, with their labels; the images are converted as they are read."""

    def __init__(
        self, dataset: Any, labels: Sequence[int], rows: Indices, transform: Transform = None, name: str = "dataset"
    ) -> None:
        self.dataset, self.labels, self.rows = dataset, [int(label) for label in labels], [int(row) for row in rows]
        self.transform, self.name = transform, name

    def __len__(self) -> int:
        return len(self.rows)

    def image(self, index: int) -> Image.Image:
        row = self.rows[index]
        return as_rgb(self.dataset[row][0], f"{self.name}[{row}]")

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = self.image(index)
        return (self.transform(image) if self.transform else image), self.labels[index]

    def sample_keys(self) -> list[str]:
        return [f"{self.name}#{row}" for row in self.rows]

    def content(self, index: int) -> bytes:
        """The pixels, after their shape."""
        pixels = np.asarray(self.image(index))
        return f"{pixels.shape}".encode() + pixels.tobytes()

    def subset(self, indices: Indices, transform: Transform) -> GivenImages:
        picked = [int(i) for i in indices]
        return GivenImages(
            self.dataset, [self.labels[i] for i in picked], [self.rows[i] for i in picked], transform, self.name
        )


def _labels(dataset: Any, name: str) -> list[int]:
    """One integer label per item: `dataset.targets` when it has one per item, else each item's second value."""
    targets = getattr(dataset, "targets", None)
    if targets is not None and len(targets) == len(dataset):
        values = targets
    else:
        logger.info("%s has no targets: reading each of its %d items once for its label", name, len(dataset))
        values = []
        for row in range(len(dataset)):
            item = dataset[row]
            if not isinstance(item, (tuple, list)) or len(item) < 2:
                raise ValueError(f"{name}[{row}] is a {type(item).__name__}; items are (image, label) pairs")
            values.append(item[1])
    labels = []
    for row, value in enumerate(values):
        label = value.item() if isinstance(value, (torch.Tensor, np.generic)) else value
        if isinstance(label, bool) or not isinstance(label, (int, np.integer)) or label < 0:
            raise ValueError(f"{name}[{row}]: label {value!r}; labels are integers 0..K-1")
        labels.append(int(label))
    return labels


def _class_names(dataset: Any, labels: list[int], name: str) -> list[str]:
    """`dataset.classes` when it names every label, else 0..K-1 (logged)."""
    count = max(labels, default=-1) + 1
    classes = getattr(dataset, "classes", None)
    if classes is None:
        logger.info("%s has no classes attribute: the classes are named 0..%d", name, count - 1)
        return [str(label) for label in range(count)]
    names = [str(c) for c in classes]
    if len(names) < count:
        raise ValueError(f"{name}.classes names {len(names)} classes but the labels go up to {count - 1}")
    return names


@dataclass(frozen=True)
class GivenData:
    """The datasets `vitlab.train(dataset=..., val_dataset=...)` trains on, in place of data.source."""

    train: Any
    val: Any | None = None

    def splits(self, train_transform: Transform, eval_transform: Transform, *, plan: SplitPlan) -> DataSplits:
        return given_splits(self.train, self.val, train_transform, eval_transform, plan=plan)


def given_splits(
    train: Any,
    val: Any | None,
    train_transform: Transform,
    eval_transform: Transform,
    *,
    plan: SplitPlan,
) -> DataSplits:
    """DataSplits of a training dataset and a validation one (None: held out of it by `plan`)."""
    if len(train) == 0:
        raise ValueError("dataset: the training dataset is empty")
    name = type(train).__name__
    labels = _labels(train, name)
    class_names = _class_names(train, labels, name)
    images = GivenImages(train, labels, range(len(train)), name=name)
    if val is None:
        train_rows, val_rows = split_indices(labels, plan.val_fraction, plan.seed)
        images, held = images.subset(train_rows, None), images.subset(val_rows, None)
    else:
        val_name = f"val_dataset {type(val).__name__}"
        val_labels = _labels(val, val_name)
        if max(val_labels, default=0) >= len(class_names):
            raise ValueError(f"{val_name}: label {max(val_labels)} beyond the {len(class_names)} training classes")
        held = GivenImages(val, val_labels, range(len(val)), name=val_name)
    carved, dev = plan.carve(images)
    carved.transform, held.transform = train_transform, eval_transform
    if dev is not None:
        dev.transform = eval_transform
    return DataSplits(carved, held, class_names, held_out=val is None, dev=dev)


__all__ = ["GivenData", "GivenImages", "as_rgb", "given_splits"]
