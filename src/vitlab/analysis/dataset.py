"""Attention over a whole dataset, batch by batch: the mean attention distance (paper Fig. 7 right)
and Attention Rollout (Fig. 6) averaged per class, and every layer and head of one image.

Only sums are kept between batches (per class: a layers x heads distance table and one rollout
map), so a dataset of any size takes the memory of one batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Sized
from dataclasses import dataclass, field

import numpy as np
import torch

from vitlab.model import VisionTransformer
from vitlab.progress import progress

from .distance import attention_distance
from .rollout import attention_maps, output_token_map


@dataclass
class ClassSums:
    images: int = 0
    correct: int = 0
    distance: np.ndarray | None = None  # (layers, heads) summed over the class's images, pixels
    rollout: np.ndarray | None = None  # (h, w) summed

    def add(self, distance: np.ndarray, rollout: np.ndarray, correct: int, images: int) -> None:
        self.distance = distance if self.distance is None else self.distance + distance
        self.rollout = rollout if self.rollout is None else self.rollout + rollout
        self.correct += correct
        self.images += images


@dataclass
class ClassAverages:
    images: int
    top1: float  # of the analysis pass itself
    distance: np.ndarray  # (layers, heads) mean attention distance, pixels
    rollout: np.ndarray  # (h, w) mean Attention Rollout of the classifier's token


@dataclass
class DatasetAttention:
    """What `dataset_attention` found: per class sums, and the first image with each head's map."""

    class_names: list[str]
    grid: tuple[int, int]
    sums: dict[int, ClassSums] = field(default_factory=dict)
    first_image: torch.Tensor | None = None  # (C, H, W), as the model saw it
    first_label: int | None = None
    head_maps: torch.Tensor | None = None  # (layers, heads, h, w): the classifier token's attention

    @property
    def images(self) -> int:
        return sum(s.images for s in self.sums.values())

    def mean_distance(self) -> np.ndarray:
        """(layers, heads) over every image."""
        sums = [s.distance for s in self.sums.values() if s.distance is not None]
        return np.sum(sums, axis=0) / self.images

    def per_class(self) -> dict[str, ClassAverages]:
        """Per class with images, in label order: count, top-1, mean distance per layer and head, mean rollout."""
        rows: dict[str, ClassAverages] = {}
        for label in sorted(self.sums):
            sums = self.sums[label]
            assert sums.distance is not None and sums.rollout is not None
            rows[self.class_names[label]] = ClassAverages(
                sums.images,
                sums.correct / sums.images,
                sums.distance / sums.images,
                sums.rollout / sums.images,
            )
        return rows


@torch.no_grad()
def dataset_attention(
    model: VisionTransformer,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
    class_names: Sequence[str],
) -> DatasetAttention:
    """Sum, per class, each image's mean attention distance and rollout map over (images, labels) batches."""
    config = model.config
    device = next(model.parameters()).device
    prefix = config.num_prefix_tokens
    result: DatasetAttention | None = None
    total = len(batches) if isinstance(batches, Sized) else None
    for images, labels in progress(batches, "analyze", total=total):
        maps = attention_maps(model, images.to(device))
        grid = config.grid_for(images.shape)
        if result is None:
            result = DatasetAttention([str(n) for n in class_names], grid)
            result.first_image, result.first_label = (
                images[0].detach().cpu().clone(),
                int(labels[0]),
            )
            result.head_maps = torch.stack(
                [
                    torch.stack(
                        [
                            output_token_map(layer[:1, head], grid, prefix, config.has_class_token)[0]
                            for head in range(layer.shape[1])
                        ]
                    )
                    for layer in maps.attentions
                ]
            ).cpu()  # (layers, heads, h, w)
        distance = attention_distance(maps.attentions, grid, config.effective_patch_size, prefix).double().cpu()
        rollout = maps.rollout.double().cpu()
        right = (maps.logits.argmax(dim=1).cpu() == labels.cpu()) if config.num_classes > 1 else None
        for label in labels.unique().tolist():
            rows = labels.cpu() == label
            result.sums.setdefault(int(label), ClassSums()).add(
                distance[rows].sum(dim=0).numpy(),
                rollout[rows].sum(dim=0).numpy(),
                int(right[rows].sum()) if right is not None else 0,
                int(rows.sum()),
            )
        # The attention of every layer of a batch: gone before the next batch arrives.
        del maps
    if result is None:
        raise ValueError("the dataset to analyse has no images")
    return result
