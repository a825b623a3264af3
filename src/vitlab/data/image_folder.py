"""ImageFolder sources: ROOT/train/<class>/*.jpg and ROOT/val/<class>/*.jpg, or ROOT/<class>/*.jpg
(or ROOT/train alone) split into train and val by a seeded stratified fraction.

Files are listed in the order of torchvision's `make_dataset` (classes sorted, then folders, then
names), following links to folders, but each real folder is walked once, so a link loop ends, and
each real file is listed once; a file reached from two classes is an error. Any file with an image
extension (including formats PIL cannot read, such as .heic) is a candidate, so that unreadable ones
are reported rather than silently left out. Other files (.txt, .json, hidden files) are ignored.
"""

from __future__ import annotations

import logging
import os
import unicodedata
from collections import Counter
from collections.abc import Collection
from pathlib import Path

from .datasets import EncodedImages, Transform
from .images import is_image_file
from .scan import finish_splits
from .splits import DataSplits, SplitPlan

VAL_DIRS = ("val", "validation")

logger = logging.getLogger("vitlab")


def find_classes(directory: Path) -> list[str]:
    """Sorted names of the class sub-folders (hidden ones, e.g. .ipynb_checkpoints, excluded)."""
    if not directory.is_dir():
        raise FileNotFoundError(f"image folder {str(directory)!r} does not exist")
    classes = sorted(e.name for e in os.scandir(directory) if e.is_dir() and not e.name.startswith("."))
    if not classes:
        raise ValueError(
            f"image folder {str(directory)!r} has no class sub-folders; expected {directory}/<class name>/<image files>"
        )
    for name in classes:  # a class name goes into config.json, run.yaml, the model card, logs and plots as text
        # Cs: a byte that is not UTF-8 (os.scandir gives it as a surrogate); Cc: a control character (a newline)
        if any(unicodedata.category(char) in ("Cs", "Cc") for char in name):
            raise ValueError(
                f"class folder {os.fsencode(directory / name)!r}: its name is not UTF-8 text or holds a control "
                "character, and a class name is written as text (config.json, the model card, plots); rename it"
            )
    return classes


def list_images(directory: Path, class_names: list[str]) -> tuple[list[str], list[int]]:
    """Paths and labels of the image files under directory/<class>/, in sorted order (not yet checked)."""
    class_to_idx = {name: i for i, name in enumerate(class_names)}
    present = find_classes(directory)
    unknown = sorted(set(present) - set(class_to_idx))
    if unknown:
        raise ValueError(
            f"class folder {str(directory / unknown[0])!r} has no counterpart in the training classes {class_names}"
        )
    samples = list_class_files(directory, {c: class_to_idx[c] for c in present})
    _require_images(directory, present, Counter(label for _, label in samples), class_names, "image files")
    return [path for path, _ in samples], [label for _, label in samples]


def list_class_files(directory: Path, class_to_idx: dict[str, int]) -> list[tuple[str, int]]:
    """(path, label) of every image file under directory/<class>/, in make_dataset's order: classes
    sorted, folders sorted by path, names sorted. Each real folder is walked once (a link loop, or a
    second link to a folder already walked, is not entered) and each real file listed once."""
    samples: list[tuple[str, int]] = []
    owner: dict[str, tuple[str, str]] = {}  # real path -> (class, the path it was listed under)
    skipped: list[str] = []
    for name in sorted(class_to_idx):
        for path in _walk_files(os.path.join(directory, name), skipped):
            real = os.path.realpath(path)
            if real in owner:
                first_class, first = owner[real]
                if first_class != name:
                    raise ValueError(
                        f"{path!r} and {first!r} are the same file {real!r}, in the class folders "
                        f"{name!r} and {first_class!r}; an image belongs to one class"
                    )
                skipped.append(path)
                continue
            owner[real] = (name, path)
            samples.append((path, class_to_idx[name]))
    if skipped:
        logger.warning(
            "%s: %d files and folders reached a second time through a link are listed once, e.g. %s",
            directory,
            len(skipped),
            skipped[0],
        )
    return samples


def _walk_files(top: str, skipped: list[str]) -> list[str]:
    """Image files under `top` (links followed, each real folder entered once), sorted as make_dataset
    sorts them. A folder is entered at most once, so the walk ends after as many steps as `top` holds
    real folders, whatever its links."""
    seen = {key} if (key := _folder_key(top)) else set()
    found: list[tuple[str, list[str]]] = []
    for root, folders, names in os.walk(top, followlinks=True):
        folders.sort()  # which of two links to one folder is entered does not depend on the disk's order
        keep = []
        for folder in folders:
            key = _folder_key(os.path.join(root, folder))
            if key in seen:
                skipped.append(os.path.join(root, folder))
            elif key is not None:
                seen.add(key)
                keep.append(folder)
        folders[:] = keep
        found.append((root, names))
    return [
        os.path.join(root, name)
        for root, names in sorted(found)
        for name in sorted(names)
        if is_image_file(os.path.join(root, name))
    ]


def _folder_key(folder: str) -> tuple[int, int] | None:
    """What a folder is, links followed: (device, inode); None when it cannot be read."""
    try:
        info = os.stat(folder)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _require_images(directory: Path, present: list[str], counts: Counter, class_names: list[str], what: str) -> None:
    for name in present:
        if counts[class_names.index(name)] == 0:
            raise ValueError(f"class folder {str(directory / name)!r} has no {what}")


def load_folder_splits(
    location: str,
    train_transform: Transform,
    eval_transform: Transform,
    *,
    plan: SplitPlan,
    max_bad_fraction: float,
    check: str,
    check_splits: Collection[str],
) -> DataSplits:
    root = Path(location).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"image folder {location!r} does not exist")
    train_dir = root / "train" if (root / "train").is_dir() else root
    val_dir = next((root / d for d in VAL_DIRS if (root / d).is_dir()), None) if train_dir != root else None
    class_names = find_classes(train_dir)

    def listed(where: Path) -> EncodedImages:
        return EncodedImages(
            *list_images(where, class_names), max_bad_fraction=max_bad_fraction, description=str(where)
        )

    splits = finish_splits(
        listed(train_dir),
        listed(val_dir) if val_dir is not None else None,
        class_names,
        train_transform=train_transform,
        eval_transform=eval_transform,
        plan=plan,
        check=check,
        check_splits=check_splits,
    )
    # A class whose every checked file is unreadable is an error, not a class that silently vanishes
    # (judged on a whole listing: a folder's train and dev splits, or all of a split folder).
    from_train = ["train"] + (["dev"] if splits.dev is not None else []) + (["val"] if splits.held_out else [])
    groups = [(train_dir, from_train)]
    if val_dir is not None:  # a val split of its own (without one, val was held out of train: splits.held_out)
        groups.append((val_dir, ["val"]))
    for where, names in groups:
        if all(name in check_splits for name in names):
            labels = Counter(label for name in names for label in getattr(splits, name).labels)
            _require_images(where, find_classes(where), labels, class_names, "readable images")
    return splits
