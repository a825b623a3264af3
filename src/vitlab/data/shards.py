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
from typing import BinaryIO

from braceexpand import braceexpand

from vitlab.bounded_read import open_regular
from vitlab.errors import RefusedFileError
from vitlab.textfiles import TextFileError, read_text

from .datasets import EncodedImages, Transform
from .images import IMAGE_EXTENSIONS, MAX_IMAGE_FILE_BYTES, check_image, read_image
from .scan import finish_splits
from .splits import DataSplits, SplitPlan

logger = logging.getLogger("vitlab")

LABEL_EXTENSIONS = ("cls", "cls.txt", "label", "label.txt")
MAX_LABEL_BYTES = 4096  # an integer or a class name
# Labels name classes 0..K-1; without a class list K is the largest label plus one, and a label of 10**9
# would make a billion class names. 2**20 is 48 times ImageNet-21k's 21,843 classes.
MAX_CLASSES = 2**20
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
    """A member's bytes; its size was checked against the limit for an image when the shard was indexed."""
    with open_regular(member.shard, what="a WebDataset shard") as file:
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
    """The image member and the label of every sample in one shard, in tar order. Every member is
    checked before it is read: a regular, non-sparse file whose bytes lie inside the shard, an image
    within the image file limit, a label of a few bytes; each key names one image and one label; and
    the shard must end with tar's end-of-archive blocks, so that one cut short is named, not shortened."""
    images: dict[str, Member] = {}
    labels: dict[str, int] = {}
    where = str(path)
    try:
        with open_regular(path, what="a WebDataset shard") as file:
            size = os.fstat(file.fileno()).st_size
            with tarfile.open(fileobj=file, mode="r:") as tar:  # uncompressed only: members must be addressable
                for info in tar:
                    sample = _sample_member(info, size, where)
                    if sample is None:
                        continue
                    key, extension = sample
                    if f".{extension}" in IMAGE_EXTENSIONS:
                        _add_once(images, key, Member(where, info.name, info.offset_data, info.size), where, "image")
                    elif extension in LABEL_EXTENSIONS:
                        if info.size > MAX_LABEL_BYTES:
                            raise ValueError(
                                f"label {where}:{info.name} is {info.size:,} bytes; a label is a number or a class name"
                            )
                        member = tar.extractfile(info)
                        assert member is not None  # None only for what is not a file, refused above
                        label = _parse_label(member.read(), f"{where}:{info.name}", class_to_idx)
                        _add_once(labels, key, label, where, "label")
                _check_end(file, tar.offset, size, where)
    except (tarfile.TarError, OSError) as error:
        raise ValueError(f"shard {where!r} is not a readable uncompressed tar file, or is cut short: {error}") from None
    except RefusedFileError as error:
        raise ValueError(f"shard {error}") from None
    no_image, no_label = sorted(labels.keys() - images.keys()), sorted(images.keys() - labels.keys())
    if no_image:
        raise ValueError(f"sample {no_image[0]!r} in shard {where!r} has a label but no image")
    if no_label:
        raise ValueError(
            f"sample {no_label[0]!r} in shard {where!r} has no label member ({', '.join(LABEL_EXTENSIONS)})"
        )
    return list(images.values()), [labels[key] for key in images]


def _sample_member(info: tarfile.TarInfo, shard_size: int, shard: str) -> tuple[str, str] | None:
    """(key, extension) of a member that belongs to a sample; None for folders and hidden files."""
    directory, base = os.path.split(info.name)
    if info.isdir() or base.startswith("."):
        return None
    if not info.isreg() or info.issparse():
        kind = "a sparse file" if info.issparse() else "a link or special file"
        raise ValueError(f"member {shard}:{info.name} is {kind}; a WebDataset sample holds regular files only")
    if info.offset_data + info.size > shard_size:
        raise ValueError(
            f"shard {shard!r} is cut short: member {info.name} declares {info.size:,} bytes, "
            f"{max(shard_size - info.offset_data, 0):,} of them there"
        )
    if info.size > MAX_IMAGE_FILE_BYTES:
        raise ValueError(f"member {shard}:{info.name} is {info.size:,} bytes, above the limit for an image file")
    stem, _, extension = base.partition(".")
    return os.path.join(directory, stem), extension.lower()


def _add_once(found: dict, key: str, value, shard: str, what: str) -> None:
    if key in found:
        raise ValueError(f"sample {key!r} in shard {shard!r} has a second {what} member; each key names one sample")
    found[key] = value


def _check_end(file: BinaryIO, offset: int, size: int, shard: str) -> None:
    """After the last member tar writes zero blocks; anything else there (or nothing) means the shard
    was cut short, inside a member's header or between members, and its last samples are lost."""
    file.seek(offset)
    rest = file.read(min(max(size - offset, 0), 2 * tarfile.BLOCKSIZE))
    if len(rest) < tarfile.BLOCKSIZE or rest.strip(tarfile.NUL):
        raise ValueError(
            f"shard {shard!r} is cut short or damaged after byte {offset:,}: no end-of-archive blocks follow "
            "its last whole member, so the samples after it are lost"
        )


def _parse_label(data: bytes, where: str, class_to_idx: dict[str, int]) -> int:
    text = data.decode("utf-8", errors="replace").strip()
    if text in class_to_idx:
        return class_to_idx[text]
    try:
        label = int(text)
    except ValueError:
        raise ValueError(f"label {text!r} in {where} is neither an integer nor a known class name") from None
    if not 0 <= label < MAX_CLASSES:
        raise ValueError(f"label {label} in {where} is outside 0..{MAX_CLASSES - 1}, the classes vitlab accepts")
    return label


def read_class_names(folder: Path) -> list[str] | None:
    for name in CLASS_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            text = read_text(path)
            content = json.loads(text) if name.endswith(".json") else None
        except (TextFileError, json.JSONDecodeError) as error:
            raise ValueError(f"class list {str(path)!r} cannot be read: {error}") from None
        if name.endswith(".txt"):
            return [line.strip() for line in text.splitlines() if line.strip()]
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
