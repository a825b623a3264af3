"""What a run leaves in DIR: run.yaml and train_digests.npy when it starts, metrics.jsonl, metrics.csv (a
row per step: run_logs.py), and at the end the model folder and summary.json (fit returns a TrainResult).

The evaluation rows live in memory for the whole run (`Trainer.metrics`); a resumed run reads the
earlier sessions' rows once, from metrics.jsonl, and the MetricsFile callback appends each new one.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch.utils.data import DataLoader, Dataset

from vitlab.data.content import write_digests
from vitlab.data.datasets import LabelledImages
from vitlab.model import BiTResNet, VisionTransformer
from vitlab.runtime import Precision
from vitlab.weights import save_pretrained

from .config import TrainConfig
from .objectives import Objective
from .plots import PLOT_FILE, plot_training_curve

log = logging.getLogger("vitlab")

RUN_FILE = "run.yaml"
SUMMARY_FILE = "summary.json"
METRICS_FILE = "metrics.jsonl"
STEPS_FILE = "metrics.csv"
STEPS_COLUMNS = ("step", "epoch", "loss", "lr", "images_per_s", "val_top1", "val_top5", "val_loss")
DIGESTS_FILE = "train_digests.npy"  # a digest of each training image's bytes (vitlab.data.content)


def record_training_images(out: Path, train: Dataset) -> None:
    """DIR/train_digests.npy, written as the run starts (a resumed run keeps its first session's), so
    that `vitlab eval` finds a training image it scores under any path, even for an unfinished run."""
    path = out / DIGESTS_FILE
    if path.is_file():
        return
    if not isinstance(train, LabelledImages):
        log.info("%s: not written: the training images are not a dataset of vitlab's to digest", path.name)
        return
    count = write_digests(path, train)
    log.info("%s: digests of the %d training images' bytes, for eval to tell them anywhere", path, count)


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
    return [
        {key: (int(value) if key == "step" else float(value)) if value else None for key, value in row.items()}
        for row in rows
    ]


def earlier_metrics(out: str | Path, step: int) -> list[dict[str, Any]]:
    """The rows of metrics.jsonl up to `step`, where a run resumes (the interrupted session may have
    evaluated past its last checkpoint); none for a run starting at step 0."""
    return [row for row in read_metrics(Path(out) / METRICS_FILE) if row["step"] <= step] if step else []


class FinishedRun(Protocol):
    """What the model folder and summary are written from (the Trainer, at the end of fit)."""

    out: Path
    config: TrainConfig
    step: int
    steps_per_epoch: int
    train_images: int
    metrics: list[dict[str, Any]]
    best: Any  # best.py's BestModel, or None (best.py imports this module)
    ema: Any
    bad_steps: int
    device: torch.device
    precision: Precision
    val_images: int
    test_loader: DataLoader | None
    objective: Objective

    @property
    def wall_time_s(self) -> float: ...

    @property
    def data_fingerprint(self) -> Mapping[str, str | None]: ...  # "train", "val": LabelledImages.fingerprint


def run_facts(run: FinishedRun) -> dict[str, Any]:
    """How the run went: what summary.json holds beside the validation and test numbers."""
    return dict(
        steps=run.step,
        epochs=round(run.step / run.steps_per_epoch, 4),
        train_images=run.train_images,
        train_split=run.data_fingerprint["train"],  # eval tells from it whether the data changed since
        wall_time_s=round(run.wall_time_s, 2),
        recipe=run.config.recipe,
        objective=run.config.objective.name,
        data=run.config.data.source,
        device=run.device.type,
        precision=run.precision.name,
        ema=run.ema is not None,
        skipped_steps=run.bad_steps,
    )


@dataclass
class TrainResult:
    """What `Trainer.fit` returns: the run's folder, its summary (summary.json) and the model it wrote."""

    out: Path
    summary: dict[str, Any]
    model: VisionTransformer | BiTResNet


def write_model_folder(run: FinishedRun, model: VisionTransformer | BiTResNet) -> dict[str, Any]:
    """Write the loadable model folder (config.json with the summary, model.safetensors), summary.json
    and the training-curve figure; the summary: the validation numbers of the last evaluation (of the
    kept best weights, with run.keep_best), the run's facts, and the test split's numbers if any."""
    out, rows = run.out, run.metrics
    best_step = run.best.step if run.best is not None and run.best.keep else None  # DIR: the kept weights
    final = rows[-1] if best_step is None else next(row for row in rows if row["step"] == best_step)
    summary = {
        "val_top1": final["val_top1"],
        "val_top5": final["val_top5"],
        "val_loss": final["val_loss"],
        **run_facts(run),
    }
    if best_step is not None:
        summary["best_step"] = best_step
    if run.config.objective.name == "mpp":
        summary["mpp_target"] = run.config.objective.mpp_target
    if run.test_loader is not None:
        test, count = run.objective.evaluate(model, run.test_loader, run.device, run.precision.autocast)
        summary.update({key.replace("val_", "test_"): value for key, value in test.items()})
        summary.update(test_images=count, dev_images=run.val_images)
        log.info("%s (%d images)", run.objective.describe(test, "test"), count)
    save_pretrained(run.objective.saved_model(model), out, training=summary)
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    title = f"{run.config.recipe} on {run.config.data.source}"
    if run.config.objective.name == "mpp":  # its val top-1 is the masked patches' target (objectives.py)
        title += f", masked patch prediction ({run.config.objective.mpp_target})"
    plot_training_curve(rows, out / PLOT_FILE, title=title, step_rows=read_step_rows(out))
    return summary
