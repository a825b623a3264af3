"""Training: recipes as typed configs, the Trainer, optimisers and schedules, checkpoints; `train` runs
a recipe in one call (`vitlab.train`)."""

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from torch.utils.data import Dataset

from vitlab.data.given import GivenData
from vitlab.errors import ConfigError
from vitlab.logs import ensure_handler

from .callbacks import Callback, MetricsFile, ProgressBar
from .config import TrainConfig, apply_mapping
from .recipes import RECIPES, get_recipe
from .run_evaluation import RunEvaluation, evaluate_run
from .trainer import Diverged, Interrupted, Trainer, TrainResult


def train(
    config: TrainConfig | str = "small-data",
    *,
    callbacks: Sequence[Callback] = (),
    dataset: Dataset | None = None,
    val_dataset: Dataset | None = None,
    **sections: Mapping[str, Any],
) -> TrainResult:
    """Train a ViT and write its model folder; returns the folder, the summary and the model.

    `config` is a TrainConfig or a recipe name; keyword arguments change sections of it:

        vitlab.train("demo", run={"out": "runs/demo"}, schedule={"steps": 300})

    `dataset` (a torch Dataset of (image, label): PIL images or image tensors, `data/given.py`) trains
    in place of data.source, validated on `val_dataset` or on a seeded stratified data.val_fraction of
    it; the run's data.source then reads "dataset:" and the dataset's type, a name that no command reads.
    """
    ensure_handler()  # its progress lines reach stderr unless the program has configured logging itself
    resolved = get_recipe(config) if isinstance(config, str) else copy.deepcopy(config)
    resolved = apply_mapping(resolved, sections, "vitlab.train()")
    given = None
    if dataset is not None:
        if "source" in sections.get("data", {}):
            raise ConfigError("vitlab.train(): give dataset= or data={'source': ...}, not both")
        resolved.data.source = f"dataset:{type(dataset).__name__}"
        given = GivenData(dataset, val_dataset)
    elif val_dataset is not None:
        raise ConfigError("vitlab.train(): val_dataset= validates a dataset=; pass dataset= too")
    return Trainer(resolved, callbacks, given=given).fit()


__all__ = [
    "Callback",
    "Diverged",
    "Interrupted",
    "MetricsFile",
    "ProgressBar",
    "RECIPES",
    "RunEvaluation",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "evaluate_run",
    "get_recipe",
    "train",
]
