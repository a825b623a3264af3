"""vitlab: the Vision Transformer (Dosovitskiy et al., ICLR 2021) end to end."""

from .model import ConfigError, ViTConfig, VisionTransformer, config_for, create_model, list_models

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ViTConfig",
    "VisionTransformer",
    "config_for",
    "create_model",
    "list_models",
]
