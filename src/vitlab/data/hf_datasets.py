"""`hf:NAME[:SPLIT]`: a Hugging Face `datasets` dataset as a data source.

NAME is a folder written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk` (read with
`load_from_disk`) or, when no such folder exists, a dataset `datasets.load_dataset` finds (its cache,
else the Hub). The images are the one column whose feature is `Image`, the labels the one `ClassLabel`
column, whose names are the class names; anything else is refused, naming the columns.

Without SPLIT, a DatasetDict trains on "train" and validates on "validation" (else "val", "valid" or
"test"), as CIFAR's test batch is its validation split; a single Dataset, or the one split SPLIT names,
has its validation images held out by the run's seeded stratified fraction, as a folder of class
folders does. The images are kept encoded and decoded by vitlab's bounded reader in the DataLoader's
workers, checked as an ImageFolder's files are (scan.py).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from .datasets import EncodedImages, Transform
from .images import BadImageError, check_image, read_image, read_image_file
from .scan import finish_splits
from .splits import DataSplits, SplitPlan

logger = logging.getLogger("vitlab")

VALIDATION_SPLITS = ("validation", "val", "valid", "test")  # the first a DatasetDict has validates
INSTALL = "pip install datasets (or vitlab[hf-datasets])"


def _datasets() -> Any:
    """The `datasets` package, imported when an hf: source is read (it is an optional dependency)."""
    try:
        import datasets
    except ImportError:
        raise ValueError(f"hf: data sources read Hugging Face datasets; {INSTALL}") from None
    return datasets


def parse_hf(location: str) -> tuple[str, str | None]:
    """(NAME, SPLIT or None) of "NAME[:SPLIT]"; a NAME that exists on disk is never split at a colon."""
    if not location:
        raise ValueError("hf: names no dataset; write hf:NAME[:SPLIT] (a save_to_disk folder or a Hub name)")
    if Path(location).expanduser().exists():
        return location, None
    name, sep, split = location.rpartition(":")
    if sep and name and re.fullmatch(r"[\w.\-]+", split):
        return name, split
    return location, None


def _load(name: str) -> Any:
    """What `name` holds: a Dataset or a DatasetDict."""
    datasets = _datasets()
    path = Path(name).expanduser()
    if path.is_dir():
        try:
            return datasets.load_from_disk(str(path))
        except (OSError, ValueError, datasets.exceptions.DatasetsError) as error:
            raise ValueError(f"hf:{name}: not a folder written by save_to_disk ({error})") from None
    if name.startswith((".", "/", "~")) or path.suffix:
        raise FileNotFoundError(f"hf:{name}: no such folder (a save_to_disk folder or a Hub dataset name)")
    logger.info("hf:%s: no such folder; datasets.load_dataset(%r) (its cache, else the Hub)", name, name)
    try:
        return datasets.load_dataset(name)
    except (OSError, ValueError, datasets.exceptions.DatasetsError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"hf:{name}: datasets.load_dataset cannot read it: {first}") from None


def _choose_splits(loaded: Any, name: str, split: str | None) -> tuple[tuple[str, Any], tuple[str, Any] | None]:
    """((name, training split), (name, validation split) or None: hold one out)."""
    if not isinstance(loaded, _datasets().DatasetDict):
        if split is not None:
            raise ValueError(f"hf:{name} is a single Dataset, not a DatasetDict; drop :{split}")
        return ("all", loaded), None
    names = ", ".join(loaded) or "none"
    if split is not None:
        if split not in loaded:
            raise ValueError(f"hf:{name} has no split {split!r}; its splits: {names}")
        return (split, loaded[split]), None
    if "train" not in loaded:
        raise ValueError(f"hf:{name} has no 'train' split; name the one to train on, hf:{name}:SPLIT (splits: {names})")
    validation = next((part for part in VALIDATION_SPLITS if part in loaded), None)
    return ("train", loaded["train"]), None if validation is None else (validation, loaded[validation])


def image_and_label_columns(table: Any, where: str) -> tuple[str, str, list[str]]:
    """(image column, label column, class names): the one `Image` and the one `ClassLabel` feature."""
    datasets = _datasets()
    features = table.features
    images = [column for column, feature in features.items() if isinstance(feature, datasets.Image)]
    labels = [column for column, feature in features.items() if isinstance(feature, datasets.ClassLabel)]
    described = ", ".join(f"{column} ({type(feature).__name__})" for column, feature in features.items())
    for kind, found, fix in (
        ("Image", images, "cast the image column to datasets.Image()"),
        ("ClassLabel", labels, "dataset.class_encode_column(LABEL) makes one"),
    ):
        if len(found) != 1:
            chosen = "no" if not found else f"{len(found)} ({', '.join(found)})"
            remedy = fix if not found else "keep one with dataset.remove_columns(...)"
            raise ValueError(f"{where}: {chosen} {kind} columns, one needed; {remedy}; its columns: {described}")
    return images[0], labels[0], list(features[labels[0]].names)


class HFImages(EncodedImages):
    """The encoded images of one column of a `datasets.Dataset`; a source is a row number."""

    def __init__(self, table: Any, column: str, labels: list[int], *, max_bad_fraction: float, description: str):
        rows = list(range(len(table)))
        super().__init__(rows, labels, None, max_bad_fraction=max_bad_fraction, description=description)
        # Undecoded: vitlab's reader decodes within its bounds, and only the image column is fetched.
        self.table = table.select_columns([column]).cast_column(column, _datasets().Image(decode=False))
        self.column = column

    def _name(self, row: int) -> str:
        return f"{self.description} row {row}"

    def encoded(self, source: Any) -> bytes:
        cell = self.table[int(source)][self.column]
        if cell and cell.get("bytes"):
            return bytes(cell["bytes"])
        if cell and cell.get("path"):
            return read_image_file(cell["path"], self._name(source))
        raise BadImageError(self._name(source), "no image in this row")

    def read(self, source: Any) -> Any:
        return read_image(self.encoded(source), name=self._name(source))

    def check(self, source: Any, decode: bool) -> None:
        check_image(self.encoded(source), name=self._name(source), decode=decode)

    def key(self, source: Any) -> str:
        return f"{self.description}#{source}"


def _images(table: Any, where: str, class_names: list[str] | None, max_bad_fraction: float) -> HFImages:
    """The split's images and labels; its class names must be `class_names` when given."""
    image_column, label_column, names = image_and_label_columns(table, where)
    if class_names is not None and names != class_names:
        raise ValueError(f"{where}: its ClassLabel names differ from the training split's ({len(names)} names)")
    labels = [int(label) for label in table[label_column]]
    unlabelled = sum(label < 0 for label in labels)
    if unlabelled:
        raise ValueError(f"{where}: {unlabelled} of {len(labels)} rows have no label (-1) in {label_column!r}")
    return HFImages(table, image_column, labels, max_bad_fraction=max_bad_fraction, description=where)


def load_hf_splits(
    location: str,
    train_transform: Transform,
    eval_transform: Transform,
    *,
    plan: SplitPlan,
    max_bad_fraction: float,
    check: str,
    check_splits: Collection[str],
) -> DataSplits:
    """The DataSplits of hf:`location` (see the module's docstring)."""
    name, split = parse_hf(location)
    (train_name, train_table), validation = _choose_splits(_load(name), name, split)
    train = _images(train_table, f"hf:{name} {train_name}", None, max_bad_fraction)
    class_names = image_and_label_columns(train_table, f"hf:{name}")[2]
    val = None
    if validation is not None:
        val = _images(validation[1], f"hf:{name} {validation[0]}", class_names, max_bad_fraction)
    logger.info(
        "hf:%s: training on split %r, validating on %s",
        name,
        train_name,
        repr(validation[0]) if validation else f"{plan.val_fraction:.0%} of it held out",
    )
    return finish_splits(
        train,
        val,
        class_names,
        train_transform=train_transform,
        eval_transform=eval_transform,
        plan=plan,
        check=check,
        check_splits=check_splits,
    )
