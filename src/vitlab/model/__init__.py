"""The Vision Transformer and its parts; knows nothing of files, data or training."""

from vitlab.errors import ConfigError

from .config import Preprocessing, ViTConfig
from .position import resample_pos_embed
from .registry import config_for, create_model, list_models
from .bit import BiTConfig, BiTResNet
from .resnet import ResNetConfig
from .variants import SIZES, parse_variant
from .vit import VisionTransformer

__all__ = [
    "BiTConfig",
    "BiTResNet",
    "ConfigError",
    "Preprocessing",
    "ResNetConfig",
    "SIZES",
    "ViTConfig",
    "VisionTransformer",
    "config_for",
    "create_model",
    "list_models",
    "parse_variant",
    "resample_pos_embed",
]
