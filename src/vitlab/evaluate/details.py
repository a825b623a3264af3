"""What `vitlab eval` adds to top-1: calibration, per-class accuracy, the confusion matrix (JSON and
PNG) and, given reassessed labels, ImageNet-ReaL accuracy; all from one PredictionLog."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .breakdown import PredictionLog, confusion_matrix, per_class
from .calibration import calibration
from .plots import plot_confusion
from .real import real_accuracy

CONFUSION_JSON = "confusion.json"
CONFUSION_PNG = "confusion.png"


def write_details(
    log: PredictionLog,
    class_names: Sequence[str],
    out_dir: str | Path | None,
    *,
    real: Sequence[Sequence[int]] | None = None,
) -> dict[str, Any]:
    """Write confusion.json and confusion.png into `out_dir` (None: nowhere); return the numbers.

    real: the ReaL label set of each logged image, in loader order (see real.match_real_labels).
    """
    labels, predicted, confidence = log.arrays()
    matrix = confusion_matrix(labels, predicted, len(class_names))
    calibrated = calibration(confidence, labels == predicted)
    details: dict[str, Any] = {
        "ece": calibrated.ece,
        "calibration": calibrated.to_dict(),
        "per_class": per_class(matrix, class_names),
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
    if real is not None:
        details["real"] = real_accuracy(predicted, real)
    return details
