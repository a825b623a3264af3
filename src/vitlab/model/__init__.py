"""The Vision Transformer and its parts; knows nothing of files, data or training.

`create_untrained` builds a freshly initialised model from a registered name or a config;
pretrained weights come from the weights layer: `vitlab.create_model(name, pretrained=...)`.
"""

from vitlab.errors import ConfigError

# The model families register themselves when imported, in the order list_models(family="all") lists them:
# the ViT, the ResNet + ViT hybrids, the BiT ResNet baseline, Axial-ViT.
# isort: off
from . import variants, hybrid, bit, axial  # noqa: F401

# isort: on
from .axial import AxialConfig, AxialViT
from .bit import BiTConfig, BiTResNet
from .config import Preprocessing, ViTConfig
from .factory import config_for, create_untrained
from .position import resample_pos_embed
from .registry import list_models
from .resnet import ResNetConfig
from .variants import SIZES, parse_variant
from .vit import VisionTransformer

__all__ = [
    "AxialConfig",
    "AxialViT",
    "BiTConfig",
    "BiTResNet",
    "ConfigError",
    "Preprocessing",
    "ResNetConfig",
    "SIZES",
    "ViTConfig",
    "VisionTransformer",
    "config_for",
    "create_untrained",
    "list_models",
    "parse_variant",
    "resample_pos_embed",
]
