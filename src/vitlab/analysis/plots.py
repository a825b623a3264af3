"""The figures, drawn as the paper draws them (Fig. 6 and Fig. 7), with matplotlib's Agg backend.

Figures are built with matplotlib.figure.Figure, not pyplot, so nothing global (backend, open
figures) changes in the caller's process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from vitlab.figures import save_figure


def _save(figure: Figure, path: str | Path) -> Path:
    return save_figure(figure, path, dpi=120, bbox_inches="tight")


def tile_mosaic(tiles: np.ndarray, gap: int = 1, fill: float = np.nan) -> np.ndarray:
    """(R, C, h, w[, 3]) tiles -> one (R*(h+gap)-gap, C*(w+gap)-gap[, 3]) image with `fill` between."""
    rows, cols, height, width = tiles.shape[:4]
    out = np.full((rows * (height + gap) - gap, cols * (width + gap) - gap) + tiles.shape[4:], fill, dtype=np.float64)
    for r in range(rows):
        for c in range(cols):
            top, left = r * (height + gap), c * (width + gap)
            out[top : top + height, left : left + width] = tiles[r, c]
    return out


def plot_attention_maps(
    images: np.ndarray,
    heat: np.ndarray,
    path: str | Path,
    title: str,
    captions: Sequence[str] | None = None,
) -> Path:
    """One row per image: the input, the input dimmed by the map (Fig. 6), the map as a heat overlay.

    images (B, H, W, 3) and heat (B, H, W), both in [0, 1].
    """
    count = len(images)
    figure = Figure(figsize=(7.5, 2.4 * count + 0.6), layout="constrained")
    axes = figure.subplots(count, 3, squeeze=False)
    for index in range(count):
        image, mask = images[index], heat[index]
        panels = (image, image * mask[..., None], image)
        names = ("Input", "Attention", "Heat map")
        for column, (panel, name) in enumerate(zip(panels, names)):
            axis = axes[index, column]
            axis.imshow(np.clip(panel, 0.0, 1.0), interpolation="bilinear")
            if column == 2:
                axis.imshow(mask, cmap="jet", alpha=0.5, vmin=0.0, vmax=1.0, interpolation="bilinear")
            axis.set_xticks([])
            axis.set_yticks([])
            if index == 0:
                axis.set_title(name)
        if captions is not None:
            axes[index, 0].set_ylabel(captions[index], fontsize=9)
    figure.suptitle(title)
    return _save(figure, path)


def plot_attention_distance(
    distances: np.ndarray, path: str | Path, image_size: tuple[int, int], uniform: float | None = None
) -> Path:
    """Fig. 7 right: mean attention distance (layers, heads) in pixels, one dot per head, x = depth."""
    layers, heads = distances.shape
    figure = Figure(figsize=(5.5, 4.2))
    axis = figure.subplots()
    colours = colormaps["viridis"](np.linspace(0.0, 0.9, heads))
    depth = np.arange(1, layers + 1)
    for head in range(heads):
        axis.scatter(depth, distances[:, head], s=22, color=colours[head], label=f"Head {head + 1}", zorder=3)
    if uniform is not None:
        axis.axhline(uniform, color="grey", linestyle="--", linewidth=1, label="uniform attention")
    axis.set_xlabel("Network depth (layer)")
    axis.set_ylabel("Mean attention distance (pixels)")
    axis.set_title(f"Mean attention distance ({image_size[0]}x{image_size[1]} input)")
    axis.set_xticks(depth)
    top = max(float(np.nanmax(distances)), uniform or 0.0)
    axis.set_ylim(0.0, 1.1 * top if top > 0 else 1.0)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, ncol=2 if heads > 8 else 1, loc="lower right")
    return _save(figure, path)


def plot_position_similarity(similarity: np.ndarray, path: str | Path) -> Path:
    """Fig. 7 centre: tile (r, c) shows the cosine similarity of patch (r, c)'s E_pos with all others."""
    rows, cols = similarity.shape[:2]
    mosaic = tile_mosaic(similarity, gap=1)
    height, width = similarity.shape[2:]
    figure = Figure(figsize=(6.0, 5.2 * rows / max(cols, 1) + 0.6))
    axis = figure.subplots()
    cmap = colormaps["viridis"].with_extremes(bad="white")  # white: the gaps between tiles
    shown = axis.imshow(np.ma.masked_invalid(mosaic), cmap=cmap, vmin=-1.0, vmax=1.0, interpolation="nearest")
    axis.set_xticks([c * (width + 1) + (width - 1) / 2 for c in range(cols)], [str(c + 1) for c in range(cols)])
    axis.set_yticks([r * (height + 1) + (height - 1) / 2 for r in range(rows)], [str(r + 1) for r in range(rows)])
    axis.tick_params(length=0, labelsize=8 if max(rows, cols) <= 16 else 6)
    for side in axis.spines.values():
        side.set_visible(False)
    axis.set_xlabel("Input patch column")
    axis.set_ylabel("Input patch row")
    axis.set_title("Position embedding similarity")
    figure.colorbar(shown, ax=axis, fraction=0.046, pad=0.04, label="Cosine similarity")
    return _save(figure, path)


def plot_filters(images: np.ndarray, path: str | Path, explained: np.ndarray | None = None) -> Path:
    """Fig. 7 left: the principal components of the embedding filters, (K, P, P, 3) in [0, 1]."""
    count = len(images)
    cols = min(count, 7)
    rows = math.ceil(count / cols)
    padded = np.ones((rows * cols,) + images.shape[1:])
    padded[:count] = images
    patch = images.shape[1]
    gap = max(1, patch // 8)
    mosaic = tile_mosaic(padded.reshape(rows, cols, *images.shape[1:]), gap=gap, fill=1.0)
    figure = Figure(figsize=(1.0 * cols + 0.4, 1.0 * rows + 0.8))
    axis = figure.subplots()
    axis.imshow(mosaic, interpolation="nearest")
    axis.set_axis_off()
    title = f"RGB embedding filters\n(first {count} principal components)"
    if explained is not None:
        title += f", {100 * float(np.sum(explained)):.0f}% of variance"
    axis.set_title(title, fontsize=10)
    return _save(figure, path)
