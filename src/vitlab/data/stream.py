"""Image files streamed in order through a DataLoader, for prediction over folders of any size.

Workers decode and resize; each batch carries the readable images as one uint8 tensor (a quarter of
the bytes of float32; BatchNormalize finishes them on the model's device) and the unreadable files
with their reasons, so that one bad file costs one row, never the run. The file list is a PathTable:
one bytes buffer and an offset array, which forked workers share without touching (a list of
Python strings would be copied page by page into each worker as reference counts change).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from .images import BadImageError, read_image


class PathTable:
    """File paths packed into one buffer: `table[i]` is the i-th path as a str."""

    def __init__(self, paths: Iterable[str | os.PathLike]) -> None:
        encoded = [os.fsencode(path) for path in paths]
        self.offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(path) for path in encoded], out=self.offsets[1:])
        self.data = np.frombuffer(b"".join(encoded), dtype=np.uint8)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> str:
        start, end = self.offsets[index], self.offsets[index + 1]
        return os.fsdecode(self.data[start:end].tobytes())

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def fingerprint(self) -> str:
        """The list in a few words: its length and the sha256 of its paths, in order."""
        digest = hashlib.sha256(self.offsets.tobytes())
        digest.update(self.data.tobytes())
        return f"{len(self)} files, sha256 {digest.hexdigest()[:16]}"


@dataclass
class FileBatch:
    """Readable images of a batch (positions in the file list, in order) and the skipped files."""

    positions: list[int]
    images: torch.Tensor  # (n, 3, H, W) uint8; n = len(positions), possibly 0
    skipped: list[tuple[int, str]]  # (position, why), in order

    def pin_memory(self) -> FileBatch:  # the DataLoader's pin_memory=True calls this on custom batches
        return FileBatch(self.positions, self.images.pin_memory(), self.skipped)


class ImageFiles(Dataset):
    """`dataset[i]` is (position, uint8 image or None, why it is unreadable or None) for the file at
    `positions[i]` of `paths` (all of them by default: a resumed run passes those left to do)."""

    def __init__(
        self,
        paths: PathTable,
        transform: Callable[[Any], torch.Tensor],
        *,
        positions: Sequence[int] | np.ndarray | None = None,
        draft: int | None = None,
    ) -> None:
        self.paths = paths
        self.transform = transform
        self.positions = np.arange(len(paths)) if positions is None else np.asarray(positions, dtype=np.int64)
        self.draft = draft

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor | None, str | None]:
        position = int(self.positions[index])
        try:
            image = read_image(self.paths[position], draft=self.draft)
        except BadImageError as error:
            return position, None, str(error)
        return position, torch.as_tensor(self.transform(image)).as_subclass(torch.Tensor), None


def collate_files(items: list[tuple[int, torch.Tensor | None, str | None]]) -> FileBatch:
    good = [(position, image) for position, image, _ in items if image is not None]
    skipped = [(position, why) for position, _, why in items if why is not None]
    images = torch.stack([image for _, image in good]) if good else torch.empty(0, 3, 0, 0, dtype=torch.uint8)
    return FileBatch([position for position, _ in good], images, skipped)


def file_loader(dataset: ImageFiles, batch_size: int, workers: int, pin_memory: bool = False) -> DataLoader:
    """Batches in file order; at most 2 per worker decoded ahead, so memory does not grow with the list."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=False,
        num_workers=workers,
        collate_fn=collate_files,
        pin_memory=pin_memory,
        prefetch_factor=2 if workers else None,
    )


def default_workers() -> int:
    """Decoding workers when none are asked for: the CPUs this process may use, less one for the
    model, at most 8 (beyond that the model is the bottleneck on CPU)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus - 1))
