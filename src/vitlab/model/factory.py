"""From a registered name or a config to a freshly initialised model: `config_for` and
`create_untrained`, both over the registry (registry.py). Pretrained weights are the weights
layer's: `vitlab.create_model(name, pretrained=...)` builds with this and loads them.
"""

from __future__ import annotations

from typing import Any

from vitlab.errors import ConfigError

from .aliases import TIMM_NAMED, from_timm_keywords, from_timm_name, is_timm_name
from .bit import BiTConfig, BiTResNet
from .config import ViTConfig
from .registry import architecture_for, family_of
from .vit import VisionTransformer

Config = ViTConfig | BiTConfig  # the config types the registered families build from
Model = VisionTransformer | BiTResNet


def config_for(name: str, **overrides: Any) -> Config:
    """The config of a registered name ("B/16", "R50+B/16", "BiT-R50x1", or one of timm's names:
    vit_base_patch16_384, deit_small_patch16_224, resnetv2_50x1_bit, ...) with any field overridden
    (image_size=384, pool="gap", ...), in vitlab's names or timm's (img_size=384, global_pool="avg")."""
    overrides = from_timm_keywords(overrides)  # timm's keywords: img_size, in_chans, drop_path_rate, ...
    if is_timm_name(name):  # timm's names are aliases: "vit_base_patch16_384" is B/16 at 384 px
        alias = from_timm_name(name)
        if alias is None:
            raise ConfigError(
                f"{name!r} is not a timm ViT vitlab builds; it reads vit_{{tiny,small,base,large,huge}}_patchP_RES, "
                f"timm's R+ViT hybrids and {', '.join(TIMM_NAMED)} (vitlab models lists vitlab's own names)"
            )
        overrides = {"image_size": alias.image_size, **alias.options, **overrides}
        return config_for(alias.model, **overrides)
    if not isinstance(name, str):
        raise ConfigError(f"a model name is a string such as 'B/16', not {type(name).__name__}")
    mlp_ratio = overrides.pop("mlp_ratio", None)
    config = family_of(name).config(name, **overrides)
    if mlp_ratio is not None:  # timm's MLP is int(dim * mlp_ratio) wide
        if not isinstance(config, ViTConfig):
            raise ConfigError(f"mlp_ratio: {name} has no transformer MLP")
        config = config.replace(mlp_dim=int(config.dim * mlp_ratio))
    return config


def resolved_config(name: str | Config, **overrides: Any) -> Config:
    """The config a registered name or a registered family's config gives, any field overridden."""
    if isinstance(name, str):
        return config_for(name, **overrides)
    architecture_for(name)  # a config of a registered model, else ConfigError
    return name.replace(**overrides) if overrides else name


def create_untrained(name: str | Config = "B/16", **overrides: Any) -> Model:
    """Build a freshly initialised model from a registered name or a config (a BiTConfig gives the
    BiT ResNet, a ViTConfig with a backbone the hybrid).

    The model layer knows nothing of the machine, so it checks no memory: vitlab.create_model and
    every reader of weights check the model against the memory available first (vitlab.memory).

    >>> model = create_untrained("Ti/4", image_size=32, num_classes=10)
    """
    config = resolved_config(name, **overrides)
    return architecture_for(config)(config)


__all__ = ["config_for", "create_untrained", "resolved_config"]
