"""vitlab: the Vision Transformer (Dosovitskiy et al., ICLR 2021) end to end."""

from .errors import CheckpointError, ConfigError
from .version import __version__ as __version__
from .model import ViTConfig, VisionTransformer, config_for, list_models
from .model.fast import optimize_for_inference
from .weights import create_model, export_npz, list_pretrained, load, save_pretrained
from . import train  # a package that can be called: vitlab.train("demo", ...)

__all__ = [
    "CheckpointError",
    "export_npz",
    "list_pretrained",
    "load",
    "save_pretrained",
    "ConfigError",
    "ViTConfig",
    "VisionTransformer",
    "config_for",
    "create_model",
    "list_models",
    "optimize_for_inference",
    "train",
]
