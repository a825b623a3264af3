"""Training: recipes as typed configs, the Trainer, optimisers and schedules, checkpoints."""

from .callbacks import Callback, MetricsFile, ProgressBar
from .config import TrainConfig
from .recipes import RECIPES, get_recipe
from .trainer import Interrupted, Trainer, TrainResult, train

__all__ = [
    "Callback",
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
