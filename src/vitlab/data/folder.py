"""ImageFolder sources: ROOT/train/<class>/*.jpg and ROOT/val/<class>/*.jpg, or ROOT/<class>/*.jpg
(or ROOT/train alone) split into train and val by a seeded stratified fraction.

Files are listed with torchvision's `make_dataset`; any file with an image extension (including
formats PIL cannot read, such as .heic) is a candidate, so that unreadable ones are reported rather
than silently left out. Other files (.txt, .json, hidden files) are ignored.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from torchvision.datasets.folder import make_dataset

from .datasets import EncodedImages, Transform
from .images import check_image, is_image_file
from .scan import scan_images
from .splits import DataSplits, split_indices

VAL_DIRS = ("val", "validation")


def find_classes(directory: Path) -> list[str]:
    """Sorted names of the class sub-folders (hidden ones, e.g. .ipynb_checkpoints, excluded)."""
    if not directory.is_dir():
        raise FileNotFoundError(f"image folder {str(directory)!r} does not exist")
    classes = sorted(e.name for e in os.scandir(directory) if e.is_dir() and not e.name.startswith("."))
    if not classes:
        raise ValueError(f"image folder {str(directory)!r} has no class sub-folders; expected "
                         f"{directory}/<class name>/<image files>")
    return classes


def list_images(directory: Path, class_names: list[str], *, check: str, max_bad_fraction: float,
                ) -> tuple[list[str], list[int]]:
    """Paths and labels of the readable images under directory/<class>/, in sorted order."""
    class_to_idx = {name: i for i, name in enumerate(class_names)}
    present = find_classes(directory)
    unknown = sorted(set(present) - set(class_to_idx))
    if unknown:
        raise ValueError(f"class folder {str(directory / unknown[0])!r} has no counterpart in the "
                         f"training classes {class_names}")
    samples = make_dataset(str(directory), {c: class_to_idx[c] for c in present},
                           is_valid_file=is_image_file, allow_empty=True)
    _require_images(directory, present, Counter(label for _, label in samples), class_names, "image files")
    good = scan_images([path for path, _ in samples], lambda path, decode: check_image(path, decode=decode),
                       mode=check, description=str(directory), max_bad_fraction=max_bad_fraction)
    if len(good) < len(samples):
        samples = [samples[i] for i in good]
        _require_images(directory, present, Counter(label for _, label in samples), class_names,
                        "readable images")
    return [path for path, _ in samples], [label for _, label in samples]


def _require_images(directory: Path, present: list[str], counts: Counter, class_names: list[str],
                    what: str) -> None:
    for name in present:
        if counts[class_names.index(name)] == 0:
            raise ValueError(f"class folder {str(directory / name)!r} has no {what}")


def load_folder_splits(location: str, train_transform: Transform, eval_transform: Transform, *,
                       val_fraction: float, seed: int, max_bad_fraction: float, check: str) -> DataSplits:
    root = Path(location).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"image folder {location!r} does not exist")
    train_dir = root / "train" if (root / "train").is_dir() else root
    val_dir = next((root / d for d in VAL_DIRS if (root / d).is_dir()), None) if train_dir != root else None
    class_names = find_classes(train_dir)
    options = dict(check=check, max_bad_fraction=max_bad_fraction)
    paths, labels = list_images(train_dir, class_names, **options)

    def images(paths: list[str], labels: list[int], transform: Transform, where: Path) -> EncodedImages:
        return EncodedImages(paths, labels, transform, max_bad_fraction=max_bad_fraction, description=str(where))

    if val_dir is not None:
        val_paths, val_labels = list_images(val_dir, class_names, **options)
        return DataSplits(images(paths, labels, train_transform, train_dir),
                          images(val_paths, val_labels, eval_transform, val_dir), class_names)
    pool = images(paths, labels, None, train_dir)
    train_idx, val_idx = split_indices(labels, val_fraction, seed)
    return DataSplits(pool.subset(train_idx, train_transform), pool.subset(val_idx, eval_transform), class_names)
