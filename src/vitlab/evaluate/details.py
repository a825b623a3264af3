"""What `vitlab eval` adds to top-1: calibration (and its reliability diagram), per-class accuracy and
precision / recall / F1 (scikit-learn's classification_report), the confusion matrix (JSON and PNG)
and, given reassessed labels, ImageNet-ReaL accuracy; all from one PredictionLog."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .breakdown import PredictionLog, confusion_matrix, per_class
from .calibration import calibration
from .plots import plot_confusion, plot_reliability
from .real import real_accuracy

CONFUSION_JSON = "confusion.json"
CONFUSION_PNG = "confusion.png"
RELIABILITY_PNG = "reliability.png"
REPORT_TXT = "classification_report.txt"


def write_details(
    log: PredictionLog,
    class_names: Sequence[str],
    out_dir: str | Path | None,
    *,
    real: Sequence[Sequence[int]] | None = None,
) -> dict[str, Any]:
    """Write confusion.json, confusion.png, reliability.png and classification_report.txt into
    `out_dir` (None: nowhere); return the numbers, and under "files" the names written.

    real: the ReaL label set of each logged image, in loader order (see real.match_real_labels).
    """
    labels, predicted, confidence = log.arrays()
    matrix = confusion_matrix(labels, predicted, len(class_names))
    calibrated = calibration(confidence, labels == predicted)
    details: dict[str, Any] = {
        "ece": calibrated.ece,
        "calibration": calibrated.to_dict(),
        "per_class": per_class(matrix, class_names),
        "classification_report": report(labels, predicted, class_names, as_dict=True),
        "confusion": None,
    }
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / CONFUSION_JSON).write_text(
            json.dumps(
                {
                    "class_names": [str(n) for n in class_names],
                    "rows": "true class",
                    "columns": "predicted class",
                    "matrix": matrix.tolist(),
                }
            )
            + "\n"
        )
        plot_confusion(matrix, class_names, out / CONFUSION_PNG)
        details["confusion"] = {"json": CONFUSION_JSON, "png": CONFUSION_PNG}
        plot_reliability(calibrated, out / RELIABILITY_PNG)
        (out / REPORT_TXT).write_text(report(labels, predicted, class_names, as_dict=False))
        details["files"] = [CONFUSION_JSON, CONFUSION_PNG, RELIABILITY_PNG, REPORT_TXT]
    if real is not None:
        details["real"] = real_accuracy(predicted, real)
    return details


def report(labels: Any, predicted: Any, class_names: Sequence[str], *, as_dict: bool) -> Any:
    """scikit-learn's classification_report over every class (a class with no images or no
    predictions scores 0, as scikit-learn's zero_division=0 says)."""
    from sklearn.metrics import classification_report

    return classification_report(
        labels,
        predicted,
        labels=list(range(len(class_names))),
        target_names=[str(n) for n in class_names],
        output_dict=as_dict,
        zero_division=0,
        digits=4,
    )
