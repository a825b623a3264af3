"""What a run leaves in DIR: run.yaml, metrics.jsonl, metrics.csv (a row per step: run_logs.py), and at
the end the model folder and summary.json.

The evaluation rows live in memory for the whole run (`Trainer.metrics`); a resumed run reads the
earlier sessions' rows once, from metrics.jsonl, and the MetricsFile callback appends each new one.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vitlab.evaluate import Evaluation
from vitlab.model import BiTResNet, VisionTransformer
from vitlab.weights import save_pretrained

from .plots import PLOT_FILE, plot_training_curve

log = logging.getLogger("vitlab")

RUN_FILE = "run.yaml"
SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.jsonl"
STEPS_FILE = "metrics.csv"
STEPS_COLUMNS = ("step", "epoch", "loss", "lr", "images_per_s", "val_top1", "val_top5", "val_loss")


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by a crash
            continue
    return rows


def read_step_rows(out: str | Path) -> list[dict[str, Any]]:
    """The rows of DIR/metrics.csv as numbers (an empty cell, a step without evaluation: None)."""
    path = Path(out) / STEPS_FILE
    if not path.is_file():
        return []
    with path.open(newline="") as file:
        rows = [row for row in csv.DictReader(file) if row.get("step") and None not in row.values()]
    return [{key: (int(value) if key == "step" else float(value)) if value else None for key, value in row.items()}
            for row in rows]


def earlier_metrics(out: str | Path, step: int) -> list[dict[str, Any]]:
    """The rows of metrics.jsonl up to `step`, where a run resumes (the interrupted session may have
    evaluated past its last checkpoint); none for a run starting at step 0."""
    return [row for row in read_metrics(Path(out) / METRICS_FILE) if row["step"] <= step] if step else []


def write_model_folder(out: Path, model: VisionTransformer | BiTResNet, rows: Sequence[dict[str, Any]], best_step: int | None,
                       facts: dict[str, Any], test: Evaluation | None, dev_images: int, title: str) -> dict[str, Any]:
    """Write the loadable model folder (config.json with the summary, model.safetensors), summary.json
    and the training-curve figure; the summary: the validation numbers of the last evaluation (of the
    kept best weights, with run.keep_best), the run's `facts`, and the test split's numbers if any."""
    final = rows[-1] if best_step is None else next(row for row in rows if row["step"] == best_step)
    summary = {"val_top1": final["val_top1"], "val_top5": final["val_top5"], "val_loss": final["val_loss"], **facts}
    if best_step is not None:
        summary["best_step"] = best_step
    if test is not None:
        summary.update(test_top1=test.top1, test_top5=test.top5, test_loss=test.loss, test_images=test.count,
                       dev_images=dev_images)
        log.info("test top-1 %.4f, top-5 %.4f (%d images)", test.top1, test.top5, test.count)
    save_pretrained(model, out, training=summary)
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    plot_training_curve(rows, out / PLOT_FILE, title=title, step_rows=read_step_rows(out))
    return summary
