"""Training: recipes as typed configs, the Trainer, optimisers and schedules, checkpoints."""

from .callbacks import Callback, MetricsFile, ProgressBar
from .config import TrainConfig
from .recipes import RECIPES, get_recipe
from .trainer import Diverged, Interrupted, Trainer, TrainResult, train

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
