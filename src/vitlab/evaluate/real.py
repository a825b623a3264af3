"""ImageNet-ReaL accuracy (Beyer et al., "Are we done with ImageNet?", 2020).

The reassessed labels (google-research/reassessed-imagenet, real.json) are a JSON list with one
entry per ImageNet validation image, in file-name order (ILSVRC2012_val_00000001.JPEG first): the
list of class indices a rater judged correct for it, possibly empty. A top-1 prediction is right if
it is in the image's list; images with an empty list are left out, as the authors' example code
does. The class indices are those of the 1000 ImageNet classes in sorted synset order, which is the
order of an ImageFolder's sorted class folders.

Images are matched to entries by sorting the scored images' file names: the i-th name in sorted
order takes entry i. A different number of images and entries is refused, not guessed around.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vitlab.textfiles import read_json


def read_real_labels(path: str | Path, num_classes: int) -> list[list[int]]:
    """The label sets of real.json, each checked to be class indices below `num_classes`."""
    entries = read_json(path)
    if not isinstance(entries, list):
        raise ValueError(  # noqa: TRY004 - a one-line user error, as the CLI prints ValueError
            f"{path}: expected a list of label lists (real.json), got a {type(entries).__name__}"
        )
    for index, labels in enumerate(entries):
        if not isinstance(labels, list) or not all(isinstance(k, int) and not isinstance(k, bool) for k in labels):
            raise ValueError(f"{path}: entry {index} is {labels!r}, not a list of class indices")
        if any(not 0 <= k < num_classes for k in labels):
            raise ValueError(f"{path}: entry {index} has class {max(labels)}, outside the model's {num_classes}")
    return entries


def match_real_labels(
    file_names: Sequence[str], real: Sequence[list[int]], source: str = "real.json"
) -> list[list[int]]:
    """The label set of each scored image (image i named file_names[i]); `real` in sorted-name order."""
    if len(file_names) != len(real):
        raise ValueError(
            f"{source} has labels for {len(real)} images but {len(file_names)} are scored; "
            f"ReaL entries match the scored images by sorted file name, so the counts must agree"
        )
    order = sorted(range(len(file_names)), key=lambda i: file_names[i])
    for previous, current in itertools.pairwise(order):
        if file_names[previous] == file_names[current]:
            raise ValueError(f"two scored images are named {file_names[current]}: ReaL matches images by file name")
    per_image: list[list[int]] = [[] for _ in file_names]
    for rank, index in enumerate(order):
        per_image[index] = list(real[rank])
    return per_image


def real_accuracy(predicted: np.ndarray, label_sets: Sequence[Sequence[int]]) -> dict[str, float | int]:
    """ReaL top-1 of `predicted` (N,) against each image's label set; images with an empty set left out."""
    if len(predicted) != len(label_sets):
        raise ValueError(f"{len(predicted)} predictions for {len(label_sets)} label sets")
    hits = [int(guess) in labels for guess, labels in zip(predicted, label_sets) if labels]
    if not hits:
        raise ValueError("every scored image has an empty ReaL label set; there is nothing to score")
    return {
        "top1": float(np.mean(hits)),
        "images": len(hits),
        "left_out": len(label_sets) - len(hits),
    }
