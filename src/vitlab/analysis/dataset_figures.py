"""The figures of a whole dataset read once: the mean attention distance over all its images,
per class, Attention Rollout averaged per class, and every layer and head of its first image."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vitlab.model import VisionTransformer

from .dataset import DatasetAttention
from .dataset_plots import plot_class_distance, plot_class_maps, plot_head_grid
from .display import display_images
from .distance import patch_distances
from .plots import plot_attention_distance
from .report import ReportFigure, ReportTable
from .result import AnalysisResult, rounded
from .rollout import upsample_map


def add_dataset_figures(
    model: VisionTransformer,
    data: DatasetAttention,
    out: Path,
    chosen: tuple[str, ...],
    result: AnalysisResult,
) -> None:
    if "distance" in chosen:
        add_distance_figures(model, data, out, result)
    if "rollout" in chosen:
        add_rollout_figures(model, data, out, result)
    add_class_table(data, chosen, result)


def add_distance_figures(model: VisionTransformer, data: DatasetAttention, out: Path, result: AnalysisResult) -> None:
    """The mean attention distance over the dataset (Fig. 7 right) and per class."""
    config = model.config
    per_class = data.per_class()
    names = list(per_class)
    mean = data.mean_distance()
    uniform = float(patch_distances(data.grid, config.effective_patch_size).mean())
    assert data.first_image is not None
    image_size = (int(data.first_image.shape[-2]), int(data.first_image.shape[-1]))
    result.figures.append(
        ReportFigure(
            "Mean attention distance (Fig. 7 right)",
            plot_attention_distance(mean, out / "attention_distance.png", image_size, uniform),
            f"Distance between query and attended patches weighted by attention, averaged over the "
            f"{data.images} images of the dataset; one dot per head. Dashed: a head attending uniformly.",
        )
    )
    result.numbers["mean_attention_distance"] = {
        "pixels": rounded(mean, 3),
        "uniform_attention_pixels": round(uniform, 3),
        "images": data.images,
    }
    table = np.stack([row.distance.mean(axis=1) for row in per_class.values()])
    result.figures.append(
        ReportFigure(
            "Mean attention distance per class",
            plot_class_distance(table, names, out / "attention_distance_per_class.png"),
            "Each class's images averaged apart; per layer, the mean over heads.",
        )
    )


def add_rollout_figures(model: VisionTransformer, data: DatasetAttention, out: Path, result: AnalysisResult) -> None:
    """Attention Rollout per class, and every layer's and head's attention on the first image."""
    config = model.config
    per_class = data.per_class()
    names = list(per_class)
    maps = np.stack([row.rollout for row in per_class.values()])
    result.figures.append(
        ReportFigure(
            "Attention Rollout per class",
            plot_class_maps(maps, names, [row.images for row in per_class.values()], out / "rollout_per_class.png"),
            "Attention Rollout to the output token, averaged over each class's images.",
        )
    )
    assert data.first_image is not None and data.head_maps is not None
    picture = display_images(data.first_image[None], config.preprocessing.mean, config.preprocessing.std)
    heads = data.head_maps
    size = (int(picture.shape[1]), int(picture.shape[2]))
    heat = upsample_map(heads.flatten(0, 1), size).reshape(*heads.shape[:2], *size)
    label = data.class_names[data.first_label] if data.first_label is not None else "?"
    result.figures.append(
        ReportFigure(
            "Every layer and head, one image",
            plot_head_grid(
                picture[0].numpy(),
                heat.numpy(),
                out / "heads.png",
                f"Attention of the output token, first image (class {label})",
            ),
            "Rows: layers; columns: heads. Each map is the attention of the token the classifier reads.",
        )
    )
    result.numbers["heads_first_image"] = {"class": label, "maps": rounded(heads)}


def add_class_table(data: DatasetAttention, chosen: tuple[str, ...], result: AnalysisResult) -> None:
    """Each class's images, top-1 and (with the distance) mean attention distance, as numbers and a table."""
    per_class = data.per_class()
    result.numbers["per_class"] = {
        name: {
            "images": row.images,
            "top1": round(row.top1, 5),
            **({"mean_attention_distance": rounded(row.distance, 3)} if "distance" in chosen else {}),
            **({"rollout": rounded(row.rollout)} if "rollout" in chosen else {}),
        }
        for name, row in per_class.items()
    }
    columns = ["class", "images", "top-1"] + (["mean attention distance (px)"] if "distance" in chosen else [])
    rows = [
        [name, str(row.images), f"{row.top1:.4f}"]
        + ([f"{float(np.mean(row.distance)):.2f}"] if "distance" in chosen else [])
        for name, row in per_class.items()
    ]
    result.tables.append(
        ReportTable(
            "Per class",
            columns,
            rows,
            f"{data.images} images; top-1 of this analysis pass; the distance is the mean over layers and heads.",
        )
    )
