"""The callbacks every run gets, and those its config turns on."""

from __future__ import annotations

from .best import BestModel
from .callbacks import Callback, MetricsFile, ProgressBar
from .config import TrainConfig
from .run_logs import StepsCsv, TensorBoard


def for_config(config: TrainConfig) -> list[Callback]:
    """Always: ProgressBar, MetricsFile (metrics.jsonl), StepsCsv (metrics.csv). run.tensorboard:
    TensorBoard. run.keep_best_by or run.early_stop_patience: BestModel (DIR/best/, early stopping)."""
    run = config.run
    callbacks: list[Callback] = [
        ProgressBar(),
        MetricsFile(str(run.out)),
        StepsCsv(str(run.out)),
    ]
    if run.tensorboard:
        callbacks.append(TensorBoard(str(run.out)))
    if run.keep_best_by or run.early_stop_patience:
        callbacks.append(
            BestModel(
                str(run.out),
                run.keep_best_by or "val_top1",
                save=run.keep_best_by is not None,
                patience=run.early_stop_patience,
            )
        )
    return callbacks
