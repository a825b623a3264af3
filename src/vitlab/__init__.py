"""vitlab: the Vision Transformer (Dosovitskiy et al., ICLR 2021) end to end.

Its names are imported when first used (a module `__getattr__`), so that `import vitlab` and
`vitlab --help` load neither torch nor what the commands run.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import CheckpointError, ConfigError
from .version import __version__ as __version__

if TYPE_CHECKING:
    from .accel import accelerate, optimize_for_inference
    from .model import VisionTransformer, ViTConfig, config_for
    from .training import evaluate_run, train
    from .training.push import push_to_hub
    from .weights import create_model, export_npz, list_pretrained, load, save_pretrained
    from .weights.listing import list_models

# Each public name and the module that defines it.
LAZY = {
    "accelerate": "vitlab.accel",
    "optimize_for_inference": "vitlab.accel",
    "VisionTransformer": "vitlab.model",
    "ViTConfig": "vitlab.model",
    "config_for": "vitlab.model",
    "list_models": "vitlab.weights.listing",  # the registry's, with pretrained=
    "create_model": "vitlab.weights",
    "export_npz": "vitlab.weights",
    "list_pretrained": "vitlab.weights",
    "load": "vitlab.weights",
    "save_pretrained": "vitlab.weights",
    "evaluate_run": "vitlab.training",
    "train": "vitlab.training",  # the function; vitlab.training is the package that holds it
    "push_to_hub": "vitlab.training.push",
}


def __getattr__(name: str) -> Any:
    if name not in LAZY:
        raise AttributeError(f"module 'vitlab' has no attribute {name!r}")
    value = getattr(importlib.import_module(LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "CheckpointError",
    "accelerate",
    "export_npz",
    "list_pretrained",
    "load",
    "save_pretrained",
    "ConfigError",
    "ViTConfig",
    "VisionTransformer",
    "config_for",
    "create_model",
    "evaluate_run",
    "list_models",
    "optimize_for_inference",
    "push_to_hub",
    "train",
]
