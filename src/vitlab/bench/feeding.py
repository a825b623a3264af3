"""How many CPU cores would feed a GPU's training step: read from a GPU bench's JSON, never typed.

The GPU bench (gpu.py) writes bench.json with the machine's "gpu" and one case per task; its B/16
training case at 224 px, vitlab's row, is the step the input pipeline must keep up with.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

STEP = ("B/16", 224, "train")  # variant, image size, task of the GPU step to feed


def measured_gpu_step(folder: Path) -> tuple[str, float, str] | None:
    """(GPU name, vitlab's images/s, file) of the first JSON in `folder` that holds a measured B/16
    training step on a GPU; None when there is none."""
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            results = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        gpu = results.get("machine", {}).get("gpu") if isinstance(results, dict) else None
        if not gpu:
            continue
        for case in results.get("cases", []):
            if (case.get("variant"), case.get("image_size"), case.get("task")) != STEP:
                continue
            rows = [row for row in case.get("rows", []) if row.get("implementation") == "vitlab"]
            if rows and rows[0].get("images_per_s"):
                return gpu, float(rows[0]["images_per_s"]), path.name
    return None


def gpu_feed_line(folder: Path, per_core: float) -> str:
    """One sentence: the cores that would feed the measured step, or why that is not reported."""
    found = measured_gpu_step(folder)
    variant, size, _ = STEP
    if found is None:
        return (
            f"Cores needed to feed a {variant} training step at {size} px on a GPU: not reported until the GPU "
            f"bench (python -m vitlab.bench.gpu) has measured that step; no JSON in {folder.as_posix()}/ holds one."
        )
    gpu, images_per_s, name = found
    cores = images_per_s / per_core
    return (
        f"A {variant} training step at {size} px on {gpu} takes {images_per_s:,.0f} images/s ({name}); at "
        f"{per_core:.1f} images/s per core, feeding it takes {math.ceil(cores)} cores of this machine ({cores:.1f})."
    )
