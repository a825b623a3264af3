"""ResNets with GroupNorm and weight-standardised convolutions: the paper's CNN baseline and the
hybrid's backbone (Sec. 3.1 "Hybrid Architecture", Sec. 4.1).

- BiT (Kolesnikov et al. 2020): a pre-activation ResNetV2 of bottleneck units, GroupNorm(32) and
  weight standardisation in every convolution (`preact=True`); bit.py adds the classifier.
- The hybrid's backbone (vit_jax models_resnet.py): the same units without pre-activation
  (conv -> GN -> ReLU, ReLU after the residual sum), GroupNorm epsilon 1e-6 (`preact=False`).
  R50+ViT-B/16 drops stage 4 and gives stage 3 nine units: layers (3, 4, 9), total stride 16.

Module names follow timm's ResNetV2 (stem.conv, stages.i.blocks.j.conv1 ...), so timm state dicts
load without renaming. The two reference codes standardise weights and pad differently; both are
config fields so that a model loaded from either computes that source's numbers.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from vitlab.config_fields import check_fields
from vitlab.errors import ConfigError

Padding = Literal["same", "symmetric"]
StemKind = Literal["standard", "small"]  # (`Stem` is the stem module below)
WeightStd = Literal["vit_jax", "timm"]

PADDINGS = ("same", "symmetric")
STEMS = ("standard", "small")
WEIGHT_STDS = ("vit_jax", "timm")


@dataclass
class ResNetConfig:
    """The convolutional trunk. Defaults: the R50+ViT-B/16 backbone with vit_jax's numerics."""

    layers: tuple[int, ...] = (3, 4, 9)  # units per stage; stage 1 keeps the resolution, later ones halve it
    width: int = 64  # root width (64 x BiT's width factor); stage i has bottleneck width width * 2**i, output 4x
    preact: bool = False  # BiT's pre-activation units; the hybrid's backbone has none
    # "standard": 7x7/2 conv + 3x3/2 max-pool (stride 4). "small": one 3x3/1 conv, no pool, for
    # 16-32 px images (the CIFAR ResNets of He et al. 2016).
    stem: StemKind = "standard"
    # "same": TensorFlow SAME padding of convolutions and max-pool (vit_jax, BiT's TF code);
    # "symmetric": PyTorch padding k // 2, the max-pool input zero-padded by 1 (BiT's PyTorch code).
    padding: Padding = "same"
    num_groups: int = 32
    norm_eps: float = 1e-6  # flax GroupNorm; BiT's PyTorch code and timm use 1e-5
    # vit_jax: (w - mean) / (std + eps), eps 1e-5; timm: (w - mean) / sqrt(var + eps), eps 1e-8.
    weight_std: WeightStd = "vit_jax"
    weight_std_eps: float = 1e-5

    def __post_init__(self) -> None:
        try:
            check_fields(self, typing.get_type_hints(ResNetConfig))
        except ConfigError as error:
            raise ConfigError(f"resnet {error}") from None
        self.validate()

    @property
    def stride(self) -> int:
        """Input pixels per feature-map pixel."""
        stem = 4 if self.stem == "standard" else 1
        return stem * 2 ** max(len(self.layers) - 1, 0)

    @property
    def out_channels(self) -> int:
        return self.width * 4 * 2 ** (len(self.layers) - 1) if self.layers else self.width

    @property
    def depth(self) -> int:
        """Weight layers counted as in "ResNet-50": three per unit, the stem and the head."""
        return 3 * sum(self.layers) + 2

    def validate(self) -> None:
        def check(ok: bool, message: str) -> None:
            if not ok:
                raise ConfigError(message)

        check(all(n > 0 for n in self.layers), f"resnet layers must be positive unit counts, got {self.layers}")
        check(self.width > 0 and self.num_groups > 0, f"resnet width {self.width} and num_groups must be positive")
        check(
            self.width % self.num_groups == 0,
            f"resnet width {self.width} is not divisible by {self.num_groups} GroupNorm groups",
        )
        check(self.stem in STEMS, f"unknown resnet stem {self.stem!r}; choose one of {STEMS}")
        check(self.padding in PADDINGS, f"unknown resnet padding {self.padding!r}; choose one of {PADDINGS}")
        check(self.weight_std in WEIGHT_STDS, f"unknown weight_std {self.weight_std!r}; choose one of {WEIGHT_STDS}")
        check(self.norm_eps > 0 and self.weight_std_eps > 0, "resnet norm_eps and weight_std_eps must be positive")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ResNetConfig:
        reject_unknown(cls, data, "ResNet")
        return cls(**data)


def reject_unknown(cls: type, names: Any, kind: str) -> None:
    unknown = sorted(set(names) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ConfigError(f"unknown {kind} config keys: {', '.join(unknown)}")


# -- padding and weight-standardised convolution -------------------------------------------------
def pad_same(x: torch.Tensor, kernel_size: int, stride: int, value: float = 0.0) -> torch.Tensor:
    """TensorFlow SAME: output ceil(size / stride); an odd total padding puts the extra pixel last."""
    pads = []
    for size in (x.shape[-1], x.shape[-2]):  # F.pad takes the last dimension first
        total = max((math.ceil(size / stride) - 1) * stride + kernel_size - size, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads, value=value)


class StdConv2d(nn.Conv2d):
    """A bias-free convolution whose filters are standardised to zero mean, unit variance on every
    call (weight standardisation, Qiao et al. 2019, which BiT pairs with GroupNorm)."""

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int, stride: int, config: ResNetConfig
    ) -> None:
        same = config.padding == "same"
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding=0 if same else kernel_size // 2, bias=False
        )
        self.same = same  # padded in forward, as it depends on the input size
        self.weight_std, self.eps = config.weight_std, config.weight_std_eps

    def standardised_weight(self) -> torch.Tensor:
        w = self.weight
        w = w - w.mean(dim=(1, 2, 3), keepdim=True)  # per output filter
        if self.weight_std == "vit_jax":
            return w / (w.std(dim=(1, 2, 3), keepdim=True, unbiased=False) + self.eps)
        return w / torch.sqrt(w.var(dim=(1, 2, 3), keepdim=True, unbiased=False) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.same:
            x = pad_same(x, self.kernel_size[0], self.stride[0])
        return F.conv2d(x, self.standardised_weight(), None, self.stride, self.padding)


def group_norm(channels: int, config: ResNetConfig) -> nn.GroupNorm:
    return nn.GroupNorm(config.num_groups, channels, eps=config.norm_eps)


# -- the two kinds of bottleneck unit -----------------------------------------------------------
def projection(in_channels: int, out_channels: int, stride: int, config: ResNetConfig) -> nn.Sequential:
    """The shortcut of a stage's first unit: 1x1 conv (+ GN without pre-activation)."""
    layers: OrderedDict[str, nn.Module] = OrderedDict(conv=StdConv2d(in_channels, out_channels, 1, stride, config))
    if not config.preact:
        layers["norm"] = group_norm(out_channels, config)
    return nn.Sequential(layers)


class PreActBottleneck(nn.Module):
    """BiT's unit (He et al. 2016b): x + conv3(relu(gn3(conv2(relu(gn2(conv1(relu(gn1(x))))))))).

    The shortcut of a projecting unit starts from the pre-activated input; the stride is on the 3x3.
    """

    def __init__(self, in_channels: int, width: int, stride: int, project: bool, config: ResNetConfig) -> None:
        super().__init__()
        out_channels = 4 * width
        self.downsample = projection(in_channels, out_channels, stride, config) if project else None
        self.norm1 = group_norm(in_channels, config)
        self.conv1 = StdConv2d(in_channels, width, 1, 1, config)
        self.norm2 = group_norm(width, config)
        self.conv2 = StdConv2d(width, width, 3, stride, config)
        self.norm3 = group_norm(width, config)
        self.conv3 = StdConv2d(width, out_channels, 1, 1, config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_preact = F.relu(self.norm1(x))
        shortcut = self.downsample(x_preact) if self.downsample is not None else x
        y = self.conv1(x_preact)
        y = self.conv2(F.relu(self.norm2(y)))
        y = self.conv3(F.relu(self.norm3(y)))
        return y + shortcut


class Bottleneck(nn.Module):
    """vit_jax's ResidualUnit: relu(x + gn3(conv3(relu(gn2(conv2(relu(gn1(conv1(x))))))))).

    gn3 starts at zero scale (as vit_jax) so that every unit starts as the identity.
    """

    def __init__(self, in_channels: int, width: int, stride: int, project: bool, config: ResNetConfig) -> None:
        super().__init__()
        out_channels = 4 * width
        self.downsample = projection(in_channels, out_channels, stride, config) if project else None
        self.conv1 = StdConv2d(in_channels, width, 1, 1, config)
        self.norm1 = group_norm(width, config)
        self.conv2 = StdConv2d(width, width, 3, stride, config)
        self.norm2 = group_norm(width, config)
        self.conv3 = StdConv2d(width, out_channels, 1, 1, config)
        self.norm3 = group_norm(out_channels, config)
        nn.init.zeros_(self.norm3.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = self.downsample(x) if self.downsample is not None else x
        y = F.relu(self.norm1(self.conv1(x)))
        y = F.relu(self.norm2(self.conv2(y)))
        y = self.norm3(self.conv3(y))
        return F.relu(y + shortcut)


class Stem(nn.Module):
    """The root block: conv (+ GN + ReLU without pre-activation) and, for the standard stem, a max-pool."""

    def __init__(self, in_channels: int, config: ResNetConfig) -> None:
        super().__init__()
        standard = config.stem == "standard"
        self.conv = StdConv2d(in_channels, config.width, 7 if standard else 3, 2 if standard else 1, config)
        self.norm = None if config.preact else group_norm(config.width, config)
        self.pool = standard
        self.same = config.padding == "same"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if self.norm is not None:
            x = F.relu(self.norm(x))
        if not self.pool:
            return x
        # SAME pads with -inf (padding never wins the max); BiT's PyTorch code pads with zeros.
        x = pad_same(x, 3, 2, value=-math.inf) if self.same else F.pad(x, (1, 1, 1, 1))
        return F.max_pool2d(x, kernel_size=3, stride=2)


class ResNet(nn.Module):
    """(B, C, H, W) -> feature map (B, out_channels, H / stride, W / stride)."""

    def __init__(self, config: ResNetConfig, in_channels: int = 3) -> None:
        super().__init__()
        self.config = config
        self.in_channels = in_channels
        self.stem = Stem(in_channels, config)
        unit = PreActBottleneck if config.preact else Bottleneck
        self.stages = nn.Sequential()
        channels = config.width
        for index, num_units in enumerate(config.layers):
            width = config.width * 2**index
            units = [
                unit(channels if j == 0 else 4 * width, width, 2 if index and j == 0 else 1, j == 0, config)
                for j in range(num_units)
            ]
            self.stages.append(nn.Sequential(OrderedDict(blocks=nn.Sequential(*units))))
            channels = 4 * width
        # Pre-activation units leave their sum unnormalised: BiT ends with GN + ReLU.
        self.norm = group_norm(channels, config) if config.preact else None
        self.grad_checkpointing = False
        self.init_weights()

    def init_weights(self) -> None:
        # Standardisation makes the scale irrelevant; timm's kaiming normal, for comparable statistics.
        for module in self.modules():
            if isinstance(module, StdConv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dim() != 4 or images.shape[1] != self.in_channels:
            raise ValueError(
                f"expected images of shape (batch, {self.in_channels}, height, width), got {tuple(images.shape)}"
            )
        x = self.stem(images)
        for stage in self.stages:
            if self.grad_checkpointing and self.training:
                x = checkpoint(stage, x, use_reentrant=False)
            else:
                x = stage(x)
        return F.relu(self.norm(x)) if self.norm is not None else x

    def set_grad_checkpointing(self, enabled: bool = True) -> None:
        """Recompute each stage in the backward pass instead of storing its activations."""
        self.grad_checkpointing = enabled
