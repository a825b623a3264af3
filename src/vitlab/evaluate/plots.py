"""The confusion matrix as a figure (matplotlib's Figure, no pyplot: nothing global changes)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from vitlab.figures import save_figure

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
