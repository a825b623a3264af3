"""The paper's comparisons in miniature, one command each:

    vitlab experiment data-scaling      --data digits --out runs/exp   # Fig. 3: ViT vs BiT vs hybrid
    vitlab experiment posemb            --data digits --out runs/exp   # Table 8: position embeddings
    vitlab experiment pooling           --data digits --out runs/exp   # Fig. 9: class token vs GAP
    vitlab experiment pretrain-transfer --data digits --out runs/exp   # FractalDB pre-training
    vitlab experiment lr-sweep          --data digits --out runs/exp   # App. B.1.1: fine-tuning LR on a dev split
    vitlab experiment self-supervision  --data digits --out runs/exp   # Sec. 4.6: masked patch prediction
    vitlab experiment axial             --data digits --out runs/exp   # Fig. 13: Axial-ViT vs ViT, FLOPs and time
    vitlab experiment shape             --data digits --out runs/exp   # Fig. 8: depth, width, MLP, patch size
    vitlab experiment compute-cost      --data digits --out runs/exp   # Fig. 12: inference speed, largest batch
    vitlab experiment compute           --data digits --out runs/exp   # Fig. 5: accuracy against training FLOPs
    vitlab experiment sgd-adam          --data digits --out runs/exp   # Table 7: BiT pre-trained with SGD vs Adam

Budgets are optimiser steps (--budget-steps), so results do not depend on the machine. Each writes
DIR/NAME.md, NAME.json and NAME.png, and keeps every run's model folder in DIR/runs/.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from . import (
    axial,
    compute,
    compute_cost,
    data_scaling,
    lr_sweep,
    pooling,
    posemb,
    pretrain_transfer,
    self_supervision,
    sgd_adam,
    shape,
)
from .report import write_report
from .runner import TRAINING_SECONDS, Experiment, Results, Settings

log = logging.getLogger("vitlab")

EXPERIMENTS: dict[str, Experiment] = {
    module.EXPERIMENT.name: module.EXPERIMENT
    for module in (
        data_scaling,
        posemb,
        pooling,
        pretrain_transfer,
        lr_sweep,
        self_supervision,
        axial,
        shape,
        compute_cost,
        compute,
        sgd_adam,
    )
}


def run_experiment(name: str, settings: Settings) -> tuple[Results, dict[str, Path]]:
    """Run experiment `name` and write its report; returns the results and the report's paths."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; experiments: {', '.join(EXPERIMENTS)}")
    experiment = EXPERIMENTS[name]
    started = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)  # the few-shot evaluations too, not only the training runs
    TRAINING_SECONDS.clear()
    try:
        results = experiment.run(settings)
    finally:
        torch.set_num_threads(threads)
    training = sum(TRAINING_SECONDS) if TRAINING_SECONDS else None  # None: the runs went through another path
    paths = write_report(experiment, settings, results, time.perf_counter() - started, training)
    log.info("%s: %s", name, ", ".join(str(path) for path in paths.values()))
    return results, paths


__all__ = ["EXPERIMENTS", "Experiment", "Results", "Settings", "run_experiment"]
