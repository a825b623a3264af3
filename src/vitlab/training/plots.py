"""The training-curve figure: loss and learning rate, and validation accuracy, against the step. The
loss and rate are drawn from every step (metrics.csv) when given, so warm-up and decay show their shape."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vitlab.figures import save_figure

PLOT_FILE = "training_curve.png"


def plot_training_curve(
    rows: Sequence[dict[str, Any]], path: str | Path, title: str = "", step_rows: Sequence[dict[str, Any]] = ()
) -> Path:
    """Write a PNG of metrics.jsonl rows and, for loss and rate, the per-step `step_rows` when there
    are any (Agg canvas: no display, no global backend switch)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # imported here: matplotlib is slow to import
    from matplotlib.figure import Figure

    path = Path(path)
    steps = [row["step"] for row in rows]
    figure = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(figure)
    loss_axes, accuracy_axes = figure.subplots(1, 2)

    curve = step_rows or rows
    curve_steps = [row["step"] for row in curve]
    loss_axes.plot(
        curve_steps,
        [row["loss"] for row in curve],
        marker="" if step_rows else "o",
        color="tab:blue",
        label="train loss",
    )
    loss_axes.set_xlabel("step")
    loss_axes.set_ylabel("train loss", color="tab:blue")
    lr_axes = loss_axes.twinx()
    lr_axes.plot(curve_steps, [row["lr"] for row in curve], color="tab:gray", linestyle="--", label="learning rate")
    lr_axes.set_ylabel("learning rate", color="tab:gray")
    lr_axes.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))

    for key, label in (("val_top1", "val top-1"), ("val_top5", "val top-5")):
        if any(row[key] is None for row in rows):  # top-5 is n/a with 5 classes or fewer
            continue
        accuracy_axes.plot(steps, [100 * row[key] for row in rows], marker="o", label=label)
    accuracy_axes.set_xlabel("step")
    accuracy_axes.set_ylabel("accuracy (%)")
    accuracy_axes.grid(alpha=0.3)
    accuracy_axes.legend(loc="lower right")
    if rows:
        best = max(rows, key=lambda row: row["val_top1"])
        accuracy_axes.set_title(f"best val top-1 {100 * best['val_top1']:.2f}% at step {best['step']}")
    if title:
        figure.suptitle(title)
    save_figure(figure, path, dpi=100)
    return path
