"""The confusion matrix and the reliability diagram as figures (matplotlib's Figure, no pyplot: nothing
global changes)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from vitlab.figures import save_figure

from .calibration import Calibration

MAX_TICK_LABELS = 40  # more classes than this: the axes are numbered, not named


def plot_confusion(confusion: np.ndarray, class_names: Sequence[str], path: str | Path) -> Path:
    """Row-normalised confusion matrix (true class down, predicted across), counts on small matrices."""
    classes = len(confusion)
    totals = confusion.sum(axis=1, keepdims=True)
    shares = np.divide(
        confusion,
        totals,
        out=np.zeros(confusion.shape, dtype=np.float64),
        where=totals > 0,
    )
    side = min(14.0, 3.0 + 0.4 * classes)
    figure = Figure(figsize=(side + 1.2, side), layout="constrained")
    axis = figure.subplots()
    shown = axis.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
    if classes <= MAX_TICK_LABELS:
        axis.set_xticks(range(classes), [str(n) for n in class_names], rotation=90, fontsize=8)
        axis.set_yticks(range(classes), [str(n) for n in class_names], fontsize=8)
    if classes <= 20:
        for row in range(classes):
            for column in range(classes):
                if confusion[row, column]:
                    colour = "white" if shares[row, column] > 0.5 else "black"
                    axis.text(
                        column,
                        row,
                        str(int(confusion[row, column])),
                        ha="center",
                        va="center",
                        fontsize=7,
                        color=colour,
                    )
    axis.set_xlabel("Predicted class")
    axis.set_ylabel("True class")
    axis.set_title(f"Confusion matrix ({int(confusion.sum())} images, rows sum to 1)")
    figure.colorbar(shown, ax=axis, fraction=0.046, pad=0.04, label="Share of the true class")
    return save_figure(figure, path, dpi=110)


def plot_reliability(calibrated: Calibration, path: str | Path) -> Path:
    """The reliability diagram (Guo et al. 2017, Fig. 1): each confidence bin's accuracy as a bar, the
    diagonal a calibrated model would follow, the gap to it shaded, and the images per bin below."""
    width = 1.0 / calibrated.bins
    centres = (np.arange(calibrated.bins) + 0.5) * width
    accuracy = np.array([a if a is not None else 0.0 for a in calibrated.accuracy])
    confidence = np.array([c if c is not None else 0.0 for c in calibrated.confidence])
    filled = np.array(calibrated.counts) > 0
    figure = Figure(figsize=(5.5, 6.5), layout="constrained")
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    top.bar(centres[filled], accuracy[filled], width=width, edgecolor="black", color="#4c72b0", label="accuracy")
    gap = confidence[filled] - accuracy[filled]
    top.bar(
        centres[filled],
        gap,
        bottom=accuracy[filled],
        width=width,
        color="#dd8452",
        alpha=0.5,
        label="gap to confidence",
    )
    top.plot([0, 1], [0, 1], "k--", linewidth=1, label="calibrated")
    top.set_xlim(0, 1)
    top.set_ylim(0, 1)
    top.set_ylabel("Accuracy")
    top.set_title(f"Reliability diagram ({sum(calibrated.counts)} images, ECE {calibrated.ece:.4f})")
    top.legend(loc="upper left", fontsize=8)
    bottom.bar(centres, calibrated.counts, width=width, edgecolor="black", color="grey")
    bottom.set_xlabel("Confidence (top-1 probability)")
    bottom.set_ylabel("Images")
    return save_figure(figure, path, dpi=110)


def plot_gallery(images: Sequence[tuple[Any, str]], path: str | Path, title: str, columns: int = 4) -> Path:
    """A grid of (PIL image, caption) pairs: eval's misclassified images, the surest mistakes first."""
    rows = max(1, -(-len(images) // columns))
    figure = Figure(figsize=(2.4 * columns, 2.6 * rows + 0.4), layout="constrained")
    axes = np.atleast_1d(figure.subplots(rows, columns)).ravel()
    for axis in axes:
        axis.set_axis_off()
    for axis, (image, caption) in zip(axes, images):
        axis.imshow(image, cmap="gray" if image.mode == "L" else None, interpolation="nearest")
        axis.set_title(caption, fontsize=8)
    figure.suptitle(title)
    return save_figure(figure, path, dpi=110)
