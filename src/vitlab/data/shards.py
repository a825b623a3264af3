"""WebDataset shards: uncompressed tar files whose members are grouped into samples by key.

A sample is the members sharing a key (the path up to the first dot of the file name), e.g.
`000042.jpg` + `000042.cls`. The image is the member with an image extension; the label is the
integer (or class name) in its `cls`, `cls.txt`, `label` or `label.txt` member. Class names come
from `classes.txt` (one per line) or `classes.json` (a list, or {name: index}) beside the shards;
without one the classes are named "0".."K-1".

SHARDS may be a brace pattern (`shards-{000000..000009}.tar`), one .tar, or a folder of them.
Validation split: in a folder holding both `train-*.tar` and `val-*.tar`, those shards; otherwise
a seeded stratified `val_fraction` of the samples.

Shards are indexed once (member offsets) so that samples are read by random access, which makes
them a map-style dataset: shuffled by the DataLoader's sampler, split exactly, resumable. That
needs local (or mounted) files; streaming from URLs is not supported.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import tarfile
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from braceexpand import braceexpand

from .datasets import EncodedImages, Transform
from .images import IMAGE_EXTENSIONS, check_image, read_image
from .scan import finish_splits
from .splits import DataSplits, SplitPlan

logger = logging.getLogger("vitlab")

LABEL_EXTENSIONS = ("cls", "cls.txt", "label", "label.txt")
CLASS_FILES = ("classes.txt", "classes.json")


@dataclass(frozen=True)
class Member:
    """Where one sample's encoded image lies inside a shard."""

    shard: str
    name: str
    offset: int
    size: int

    def __str__(self) -> str:
        return f"{self.shard}:{self.name}"


class ShardImages(EncodedImages):
    """Samples of WebDataset shards, read by offset; sources are Members."""

    def read(self, source: Member):
        return read_image(read_member(source), name=str(source))

    def encoded(self, source: Member) -> bytes:
        return read_member(source)

    def check(self, source: Member, decode: bool) -> None:
        check_image(read_member(source), name=str(source), decode=decode)

    def key(self, source: Member) -> str:
        return f"{os.path.realpath(source.shard)}:{source.name}"


def read_member(member: Member) -> bytes:
    with open(member.shard, "rb") as file:
        file.seek(member.offset)
        return file.read(member.size)


def looks_like_shards(location: str) -> bool:
    if location.endswith(".tar") or ("{" in location and ".tar" in location):
        return True
    path = Path(location).expanduser()
    return path.is_dir() and any(path.glob("*.tar")) and not any(p.is_dir() for p in path.iterdir())


def expand_shards(location: str) -> list[Path]:
    paths = [Path(p).expanduser() for p in braceexpand(location)]
    if len(paths) == 1 and paths[0].is_dir():
        paths = sorted(paths[0].glob("*.tar"))
        if not paths:
            raise FileNotFoundError(f"shard folder {location!r} holds no .tar files")
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"shard {str(path)!r} does not exist (from {location!r})")
    return paths


def index_shard(path: Path, class_to_idx: dict[str, int]) -> tuple[list[Member], list[int]]:
    """The image member and the label of every sample in one shard, in tar order."""
    images: dict[str, Member] = {}
    labels: dict[str, int] = {}
    try:
        with tarfile.open(path, "r:") as tar:  # uncompressed only: members must be addressable
            for info in tar:
                directory, base = os.path.split(info.name)
                if not info.isfile() or base.startswith("."):
                    continue
                stem, _, extension = base.partition(".")
                key, extension = os.path.join(directory, stem), extension.lower()
                if f".{extension}" in IMAGE_EXTENSIONS and key not in images:
                    images[key] = Member(str(path), info.name, info.offset_data, info.size)
                elif extension in LABEL_EXTENSIONS:
                    member = tar.extractfile(info)
                    assert member is not None  # None only for what is not a file, skipped above
                    labels[key] = _parse_label(member.read(), f"{path}:{info.name}", class_to_idx)
    except (tarfile.TarError, OSError) as error:
        raise ValueError(f"shard {str(path)!r} is not a readable uncompressed tar file: {error}") from None
    no_image, no_label = sorted(labels.keys() - images.keys()), sorted(images.keys() - labels.keys())
    if no_image:
        raise ValueError(f"sample {no_image[0]!r} in shard {str(path)!r} has a label but no image")
    if no_label:
        raise ValueError(
            f"sample {no_label[0]!r} in shard {str(path)!r} has no label member ({', '.join(LABEL_EXTENSIONS)})"
        )
    return list(images.values()), [labels[key] for key in images]


def _parse_label(data: bytes, where: str, class_to_idx: dict[str, int]) -> int:
    text = data.decode("utf-8", errors="replace").strip()
    if text in class_to_idx:
        return class_to_idx[text]
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"label {text!r} in {where} is neither an integer nor a known class name") from None


def read_class_names(folder: Path) -> list[str] | None:
    for name in CLASS_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if name.endswith(".txt"):
            return [line.strip() for line in path.read_text().splitlines() if line.strip()]
        try:
            content = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"class list {str(path)!r} is not valid JSON: {error}") from None
        if isinstance(content, dict):  # {name: index}
            return [name for name, _ in sorted(content.items(), key=lambda item: int(item[1]))]
        if isinstance(content, list):
            return [str(name) for name in content]
        raise ValueError(f"class list {str(path)!r} must be a list of names or a {{name: index}} object")
    return None


def load_shard_set(
    paths: list[Path], class_names: list[str] | None, *, description: str, max_bad_fraction: float
) -> ShardImages:
    class_to_idx = {name: i for i, name in enumerate(class_names or [])}
    members: list[Member] = []
    labels: list[int] = []
    for path in paths:
        shard_members, shard_labels = index_shard(path, class_to_idx)
        members += shard_members
        labels += shard_labels
    if not members:
        raise ValueError(f"shards {description} hold no samples")
    return ShardImages(members, labels, max_bad_fraction=max_bad_fraction, description=description)


def load_shard_splits(
    location: str,
    train_transform: Transform,
    eval_transform: Transform,
    *,
    plan: SplitPlan,
    max_bad_fraction: float,
    check: str,
    check_splits: Collection[str],
) -> DataSplits:
    paths = expand_shards(location)
    folder = paths[0].parent
    train_paths = [p for p in paths if p.name.startswith("train-")]
    val_paths = [p for p in paths if p.name.startswith("val-")]
    named_split = Path(location).expanduser().is_dir() and bool(train_paths) and bool(val_paths)
    class_names = read_class_names(folder)
    load = functools.partial(load_shard_set, class_names=class_names, max_bad_fraction=max_bad_fraction)
    if named_split:
        train = load(train_paths, description=f"{folder}/train-*.tar")
        val = load(val_paths, description=f"{folder}/val-*.tar")
        all_labels = train.labels + val.labels
    else:
        train, val = load(paths, description=location), None
        all_labels = train.labels
    if class_names is None:
        class_names = [str(i) for i in range(max(all_labels) + 1)]
        logger.info(
            "no %s beside the shards in %s; naming the classes 0..%d",
            " or ".join(CLASS_FILES),
            folder,
            len(class_names) - 1,
        )
    bad = [label for label in all_labels if not 0 <= label < len(class_names)]
    if bad:
        raise ValueError(f"shard label {bad[0]} is outside the {len(class_names)} classes of {folder}")
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
