"""Training: recipes as typed configs, the Trainer, optimisers and schedules, checkpoints."""

import sys

from .callbacks import Callback, MetricsFile, ProgressBar
from .config import TrainConfig
from .recipes import RECIPES, get_recipe
from .trainer import Diverged, Interrupted, Trainer, TrainResult, train


class _CallablePackage(type(sys.modules[__name__])):
    """`vitlab.train(...)` runs a recipe while `vitlab.train` stays this package, so that
    `import vitlab.train.recipes as recipes` and friends keep working."""

    def __call__(self, *args, **kwargs):
        return train(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage

__all__ = [
    "Callback",
    "Diverged",
    "Interrupted",
    "MetricsFile",
    "ProgressBar",
    "RECIPES",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "get_recipe",
    "train",
]
