"""BiT (Kolesnikov et al. 2020), the paper's ResNet baseline (Sec. 4.1): the pre-activation ResNetV2
trunk of resnet.py, global average pooling and a linear head, with the ViT's interface
(forward_features / forward_head / reset_classifier); and the names of BiT's released sizes.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from vitlab.config_fields import check_fields
from vitlab.errors import ConfigError

from .config import Preprocessing, as_pair
from .registry import Family, make_config, register_architecture, register_family
from .resnet import ResNet, ResNetConfig, reject_unknown
from .timm_api import pretrained_cfg


def bit_resnet_config(**changes: Any) -> ResNetConfig:
    """A pre-activation ResNetV2 with the numerics of BiT's PyTorch release as timm ports it."""
    fields: dict[str, Any] = dict(
        layers=(3, 4, 6, 3), preact=True, padding="symmetric", norm_eps=1e-5, weight_std="timm", weight_std_eps=1e-8
    )
    fields.update(changes)
    return ResNetConfig(**fields)


@dataclass
class BiTConfig:
    """BiT (Kolesnikov et al. 2020), the paper's ResNet baseline: trunk, global average pool, linear head."""

    resnet: ResNetConfig = field(default_factory=bit_resnet_config)
    image_size: tuple[int, int] = (224, 224)  # nominal resolution (data pipelines read it); any size runs
    in_channels: int = 3
    num_classes: int = 1000
    head_dropout: float = 0.0
    preprocessing: Preprocessing = field(default_factory=Preprocessing)  # BiT maps pixels to [-1, 1]
    class_names: list[str] | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        self.image_size = as_pair(self.image_size)
        check_fields(self, typing.get_type_hints(BiTConfig))
        if self.class_names is not None and len(self.class_names) != self.num_classes:
            raise ConfigError(f"class_names lists {len(self.class_names)} names for num_classes={self.num_classes}")
        if self.in_channels <= 0:
            raise ConfigError(f"in_channels must be positive, got {self.in_channels}")
        if self.num_classes < 0:
            raise ConfigError(f"num_classes must be >= 0, got {self.num_classes}")
        if not 0.0 <= self.head_dropout < 1.0:
            raise ConfigError(f"head_dropout must be in [0, 1), got {self.head_dropout}")

    @property
    def feature_dim(self) -> int:
        return self.resnet.out_channels

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (tuples as lists), so the dict equals its JSON round trip."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BiTConfig:
        reject_unknown(cls, data, "BiT")
        return cls(**data)

    def replace(self, **changes: Any) -> BiTConfig:
        reject_unknown(type(self), changes, "BiT")
        return dataclasses.replace(self, **changes)


class BiTResNet(ResNet):
    """The ResNet classifier with the ViT's interface: forward_features -> (B, C, h, w) feature map,
    forward_head pools it (the few-shot representation with pre_logits=True) and classifies."""

    # The classifier's config holds the trunk's (config.resnet), which ResNet.config is.
    config: BiTConfig  # type: ignore[assignment]

    def __init__(self, config: BiTConfig) -> None:
        super().__init__(config.resnet, config.in_channels)
        self.config = config
        self.head_drop = nn.Dropout(config.head_dropout)
        self.head = nn.Linear(config.feature_dim, config.num_classes) if config.num_classes else nn.Identity()
        self.zero_head()

    def zero_head(self) -> None:
        # BiT fine-tunes from a zero-initialised head, as ViT does (paper Sec. 3.2).
        if isinstance(self.head, nn.Linear):
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        return super().forward(images)

    def forward_head(self, features: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        pooled = self.head_drop(features.mean(dim=(2, 3)))  # (B, C)
        return pooled if pre_logits else self.head(pooled)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(images))

    def reset_classifier(
        self, num_classes: int, global_pool: str | None = None, *, class_names: list[str] | None = None
    ) -> None:
        """timm's signature; a BiT ResNet pools by averaging ('avg'), the only global_pool it takes."""
        if global_pool is not None and global_pool != "avg":
            raise ConfigError(
                f"global_pool={global_pool!r}: a BiT ResNet averages its feature map ('avg'); class names go in class_names="
            )
        if class_names is not None and len(class_names) != num_classes:
            raise ConfigError(f"{len(class_names)} class names for {num_classes} classes")
        self.config = self.config.replace(num_classes=num_classes, class_names=class_names)
        reference = self.stem.conv.weight
        self.head = (
            nn.Linear(self.config.feature_dim, num_classes).to(reference.device, reference.dtype)
            if num_classes
            else nn.Identity()
        )
        self.zero_head()

    @property
    def pretrained_cfg(self) -> dict[str, Any]:
        """timm's per-weight record (so that timm.data.resolve_model_data_config reads this model's
        preprocessing), with timm's name of the trunk where it is one of timm's BiT models."""
        architecture = timm_bit_architecture(self.config.resnet) or self.config.name
        return pretrained_cfg(self.config, architecture, "stem.conv", fixed_input_size=False)

    @property
    def default_cfg(self) -> dict[str, Any]:  # timm's older name for pretrained_cfg
        return self.pretrained_cfg

    def set_image_size(self, image_size: int | tuple[int, int]) -> None:
        """A convolutional net runs at any size; only the nominal resolution changes."""
        self.config = self.config.replace(image_size=as_pair(image_size))

    def no_weight_decay(self) -> set[str]:
        """Norm parameters and biases (every parameter of at most one dimension)."""
        return {name for name, param in self.named_parameters() if param.dim() <= 1}


# -- registered BiT models ----------------------------------------------------------------------
# ResNet depth -> bottleneck units per stage (He et al. 2016, Table 1; 26 as timm's resnetv2_26).
RESNET_LAYERS: dict[int, tuple[int, ...]] = {26: (2, 2, 2, 2), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
# BiT's released sizes; a "-small" suffix swaps in the 3x3/1 stem for 16-32 px images.
BIT_MODELS = (
    "BiT-R50x1",
    "BiT-R50x3",
    "BiT-R101x1",
    "BiT-R101x3",
    "BiT-R152x2",
    "BiT-R152x4",
    "BiT-R26x1-small",
    "BiT-R50x1-small",
)
BIT_NAME = re.compile(r"BiT-R(?P<depth>\d+)x(?P<width_factor>\d+)(?P<small>-small)?")


def timm_bit_architecture(resnet: ResNetConfig) -> str | None:
    """timm's resnetv2_{depth}x{width}_bit for a trunk of one of its BiT models with its numerics, else None."""
    depth = {layers: depth for depth, layers in RESNET_LAYERS.items()}.get(resnet.layers)
    if depth is None or depth == 26 or resnet.width % 64:
        return None
    same = bit_resnet_config(layers=resnet.layers, width=resnet.width) == resnet
    return f"resnetv2_{depth}x{resnet.width // 64}_bit" if same else None


def is_bit_name(name: str) -> bool:
    return name.startswith("BiT-")


def bit_config(name: str, **overrides: Any) -> BiTConfig:
    """ "BiT-R50x3" -> BiTConfig of ResNet-50 at 3x width; any BiTConfig field can be overridden."""
    match = BIT_NAME.fullmatch(name)
    if match is None or int(match["depth"]) not in RESNET_LAYERS:
        raise ConfigError(
            f"BiT model {name!r} is not of the form BiT-R<depth>x<width factor>[-small] "
            f"with depth in {sorted(RESNET_LAYERS)} (e.g. 'BiT-R50x1')"
        )
    resnet = bit_resnet_config(
        layers=RESNET_LAYERS[int(match["depth"])],
        width=64 * int(match["width_factor"]),
        stem="small" if match["small"] else "standard",
    )
    fields: dict[str, Any] = dict(name=name, resnet=resnet, image_size=32 if match["small"] else 224)
    fields.update(overrides)
    return make_config(BiTConfig, name, fields)


register_architecture(BiTConfig, BiTResNet)
register_family(Family("bit", BIT_MODELS, bit_config, claims=is_bit_name))
