"""`load_datasets(SRC, ...)`: turn a data spec into train/val datasets.

SRC is one of
  digits                      scikit-learn's 8x8 digits (built in)
  [imagefolder:]DIR           DIR/train/<class>/* and DIR/val/<class>/*, or class folders to split
  [cifar10:|cifar100:]DIR     the python-pickle release (cifar-10-batches-py/ or cifar-100-python/);
                              plain "cifar10" / "cifar100" look in (or download to) the working folder
  [wds:]SHARDS                WebDataset tars: "shards-{000000..000009}.tar", one .tar, or a folder
  hf:NAME[:SPLIT]             a Hugging Face `datasets` dataset: a save_to_disk folder or a Hub name
Without a prefix the kind is recognised from what is on disk. Every problem with the spec or the
files raises one ValueError / FileNotFoundError naming the path, before any training starts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection
from pathlib import Path

from .datasets import Transform
from .scan import CHECKS, SPLITS
from .splits import DataSplits, SplitPlan

KINDS = ("digits", "imagefolder", "cifar10", "cifar100", "wds", "hf")
SPEC_HELP = (
    "expected 'digits', an ImageFolder root, a CIFAR-10/100 python folder or WebDataset "
    "shards, optionally prefixed with imagefolder:, cifar10:, cifar100: or wds:, or hf:NAME[:SPLIT] "
    "(a Hugging Face datasets folder or Hub name)"
)


def parse_source(source: str) -> tuple[str, str]:
    """(kind, location) for a data spec; the kind is guessed from the files when not given."""
    source = str(source).strip()
    if not source:
        raise ValueError(f"empty data source; {SPEC_HELP}")
    if source == "digits":
        return "digits", ""
    if source.lower() in ("cifar10", "cifar100") and not os.path.exists(source):
        return source.lower(), "."  # the release folder in the working directory (or --download there)
    prefix, sep, rest = source.partition(":")
    if sep and prefix.lower() in KINDS and prefix.lower() != "digits":
        return prefix.lower(), rest
    if sep and prefix == "dataset":
        raise ValueError(
            f"data source {source!r} was a dataset object given to vitlab.train(dataset=...), which no "
            "command can read back; give the data again (--data SRC, or dataset=)"
        )
    # "name:rest" with an unknown name (not a Windows drive letter, not a real path) is a typo.
    if sep and re.fullmatch(r"[A-Za-z][\w-]+", prefix) and not os.path.exists(source):
        raise ValueError(f"unknown data source kind {prefix!r} in {source!r}; {SPEC_HELP}")
    return _guess_kind(source), source


def _guess_kind(location: str) -> str:
    from .cifar import find_cifar_folder
    from .shards import looks_like_shards

    if looks_like_shards(location):
        return "wds"
    path = Path(location).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"data source {location!r} not found: no such file or folder; {SPEC_HELP}")
    if not path.is_dir():
        raise ValueError(f"data source {location!r} is a file, not a folder or .tar shard; {SPEC_HELP}")
    found = find_cifar_folder(path)
    if found is not None:
        return found[0]
    return "imagefolder"


def _loader(kind: str) -> Callable[..., DataSplits]:
    """The function that lists, splits and checks a source of encoded images of this kind."""
    if kind == "imagefolder":
        from .image_folder import load_folder_splits

        return load_folder_splits
    if kind == "hf":
        from .hf_datasets import load_hf_splits

        return load_hf_splits
    from .shards import load_shard_splits

    return load_shard_splits


def load_datasets(
    source: str,
    train_transform: Transform,
    eval_transform: Transform,
    *,
    val_fraction: float = 0.2,
    seed: int = 0,
    train_fraction: float = 1.0,
    dev_fraction: float | None = None,
    dev_split: str = "stratified",
    download: bool = False,
    max_bad_fraction: float = 0.01,
    check: str = "auto",
    check_splits: Collection[str] = SPLITS,
) -> DataSplits:
    """Train and val datasets for SRC, each applying its transform to RGB PIL images.

    Sources with a validation set of their own use it (ImageFolder val/, CIFAR's test batch,
    val-*.tar shards; `digits` has a fixed split); the others hold out a seeded stratified
    `val_fraction`; `dev_fraction` carves a development split (DataSplits.dev) from the training
    split, and `train_fraction` < 1 keeps that class-balanced share of the rest (see SplitPlan: all
    seeded by `seed`, and decided on the file listing, so the same whatever decodes). The
    image files of the splits in `check_splits` are checked as the datasets are built (`check`:
    "decode" fully decodes each one, "header" only reads headers, "none" trusts them, "auto" decodes
    splits of up to 50,000 images); unreadable ones are skipped and named once in the log, and more
    than `max_bad_fraction` of a split stops here with an error.
    """
    if check not in CHECKS:
        raise ValueError(f"check must be one of {CHECKS}, got {check!r}")
    kind, location = parse_source(source)
    plan = SplitPlan(val_fraction, seed, train_fraction, dev_fraction, dev_split)
    if kind in ("digits", "cifar10", "cifar100"):  # decoded arrays with a fixed split: nothing to check
        if kind == "digits":
            from .digits import load_digits_splits

            splits = load_digits_splits(train_transform, eval_transform)
        else:
            from .cifar import load_cifar_splits

            splits = load_cifar_splits(kind, location, train_transform, eval_transform, download=download)
        splits.train, splits.dev = plan.carve(splits.train)
        if splits.dev is not None:
            splits.dev.transform = eval_transform
        return splits
    if download:
        raise ValueError(f"--download only fetches CIFAR-10/100, not {kind} source {location!r}")
    return _loader(kind)(
        location,
        train_transform,
        eval_transform,
        plan=plan,
        max_bad_fraction=max_bad_fraction,
        check=check,
        check_splits=check_splits,
    )
