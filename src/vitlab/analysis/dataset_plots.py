"""Figures of a dataset-level analysis: per-class attention distance and rollout, and one image's
attention in every layer and head. matplotlib's Figure, no pyplot (see plots.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from .plots import _save

MAX_CLASSES_DRAWN = 48  # per-class rollout maps: more classes than this, the first ones only


def plot_class_distance(distance: np.ndarray, names: Sequence[str], path: str | Path) -> Path:
    """Mean attention distance per layer (averaged over heads), one line per class; distance (C, layers)."""
    classes, layers = distance.shape
    figure = Figure(figsize=(6.0, 4.2))
    axis = figure.subplots()
    colours = colormaps["tab20"](np.arange(classes) % 20)
    depth = np.arange(1, layers + 1)
    for index in range(classes):
        axis.plot(
            depth,
            distance[index],
            marker="o",
            markersize=3,
            color=colours[index],
            label=str(names[index]),
        )
    axis.set_xlabel("Network depth (layer)")
    axis.set_ylabel("Mean attention distance (pixels)")
    axis.set_title("Mean attention distance per class (mean over heads)")
    axis.set_xticks(depth)
    axis.set_ylim(bottom=0.0)
    axis.grid(alpha=0.3)
    if classes <= 20:
        axis.legend(fontsize=7, ncol=2 if classes > 10 else 1, loc="lower right")
    return _save(figure, path)


def plot_class_maps(maps: np.ndarray, names: Sequence[str], counts: Sequence[int], path: str | Path) -> Path:
    """Attention Rollout averaged over each class's images; maps (C, h, w), each scaled to its maximum."""
    shown = min(len(maps), MAX_CLASSES_DRAWN)
    cols = min(shown, 6)
    rows = math.ceil(shown / cols)
    figure = Figure(figsize=(1.9 * cols + 0.4, 2.0 * rows + 0.6), layout="constrained")
    axes = figure.subplots(rows, cols, squeeze=False)
    for index, axis in enumerate(axes.flat):
        axis.set_axis_off()
        if index < shown:
            peak = float(maps[index].max()) or 1.0
            axis.imshow(
                maps[index] / peak,
                cmap="inferno",
                vmin=0.0,
                vmax=1.0,
                interpolation="bicubic",
            )
            axis.set_title(f"{names[index]} ({counts[index]})", fontsize=8)
    extra = f", first {shown} of {len(maps)} classes" if shown < len(maps) else ""
    figure.suptitle(f"Attention Rollout averaged per class (images per class in brackets{extra})")
    return _save(figure, path)


def plot_head_grid(picture: np.ndarray, heat: np.ndarray, path: str | Path, caption: str) -> Path:
    """The classifier token's attention in every layer (rows) and head (columns) over one picture.

    picture (H, W, 3) in [0, 1]; heat (layers, heads, H, W) in [0, 1].
    """
    layers, heads = heat.shape[:2]
    figure = Figure(figsize=(1.6 * heads + 0.8, 1.6 * layers + 0.8), layout="constrained")
    axes = figure.subplots(layers, heads, squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            axis = axes[layer, head]
            axis.imshow(picture, interpolation="bilinear")
            axis.imshow(
                heat[layer, head],
                cmap="jet",
                alpha=0.5,
                vmin=0.0,
                vmax=1.0,
                interpolation="bilinear",
            )
            axis.set_xticks([])
            axis.set_yticks([])
            if layer == 0:
                axis.set_title(f"head {head + 1}", fontsize=8)
            if head == 0:
                axis.set_ylabel(f"layer {layer + 1}", fontsize=8)
    figure.suptitle(caption)
    return _save(figure, path)
