"""vitlab: the Vision Transformer (Dosovitskiy et al., ICLR 2021) end to end."""

from . import train  # a package that can be called: vitlab.train("demo", ...)
from .accel import accelerate, optimize_for_inference
from .errors import CheckpointError, ConfigError
from .model import VisionTransformer, ViTConfig, config_for, list_models
from .version import __version__ as __version__
from .weights import create_model, export_npz, list_pretrained, load, save_pretrained

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
    "list_models",
    "optimize_for_inference",
    "train",
]
