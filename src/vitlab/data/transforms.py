"""Image -> tensor pipelines from torchvision.transforms.v2, as the paper's reference code builds them.

Training: inception-style random resized crop (area 5-100%, vit_jax's default) and a horizontal flip,
optionally RandAugment as timm defines it (AugReg / DeiT; randaugment.py). Evaluation: resize to `size / crop_pct`, centre crop `size`
(timm's convention and its crop modes: "center" keeps the aspect ratio, "squash" does not). Both end in the checkpoint's mean/std normalisation; vit_jax uses 0.5/0.5, i.e.
pixels in [-1, 1]. `train_transform` / `eval_transform` build them from a model's preprocessing
(mean, std, crop_pct, interpolation: any object with those fields) and a run's augmentation values,
random erasing last, on the normalised image, as timm places it; `batch_mixing` is Mixup/CutMix on
whole batches.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode, v2

from vitlab.config_fields import CROP_MODES, CROP_PCT_RULE, crop_mode_for, crop_pct_ok, std_ok
from vitlab.config_fields import INTERPOLATIONS as INTERPOLATION_NAMES

from .augmentation import AugmentSpec
from .keras_augment import RandomRotation, RandomZoom
from .randaugment import RandAugment

INTERPOLATIONS = {name: InterpolationMode(name) for name in INTERPOLATION_NAMES}
PIL_INTERPOLATIONS = {name: Image.Resampling[name.upper()] for name in INTERPOLATION_NAMES}


def size_pair(image_size: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(image_size, int):
        pair: tuple[int, ...] = (image_size, image_size)
    else:
        pair = tuple(int(s) for s in image_size)
    if len(pair) != 2 or min(pair) <= 0:
        raise ValueError(f"image_size must be a positive int or (height, width), got {image_size!r}")
    height, width = pair
    return height, width


def build_transforms(
    image_size: int | tuple[int, int],
    *,
    mean: Sequence[float],
    std: Sequence[float],
    train: bool,
    interpolation: str = "bicubic",
    crop_pct: float = 0.875,
    crop_mode: str | None = None,
    scale: tuple[float, float] = (0.05, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
    hflip: bool = True,
    randaugment: tuple[int, int] | None = None,
    normalize: bool = True,
) -> v2.Compose:
    """The transform for one split: an RGB PIL image -> normalised float tensor (3, H, W); with
    `normalize=False` it stops at the uint8 tensor, for BatchNormalize to finish on whole batches.

    Evaluation resizes as timm's `crop_mode` says (None: "center" for a square size, else "squash";
    config_fields.crop_mode_for). `randaugment` is (number of ops, magnitude out of 10), e.g. (2, 10) as in AugReg: timm's
    `rand-m10-n2` (see randaugment.py). Tiny images such as the
    8x8 digits want `crop_pct=1.0` and a gentle `scale` such as (0.6, 1.0): the default area range
    would crop single strokes.
    """
    height, width = size_pair(image_size)
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"unknown interpolation {interpolation!r}; choose one of {sorted(INTERPOLATIONS)}")
    if not crop_pct_ok(crop_pct):
        raise ValueError(f"crop_pct {CROP_PCT_RULE}, got {crop_pct}")
    if crop_mode is not None and crop_mode not in CROP_MODES:
        raise ValueError(f"unknown crop_mode {crop_mode!r}; choose one of {CROP_MODES}")
    if not 0.0 < scale[0] <= scale[1] <= 1.0:
        raise ValueError(f"scale must satisfy 0 < min <= max <= 1, got {scale}")
    if len(mean) != len(std) or not std_ok(std):
        raise ValueError(f"mean {tuple(mean)} and std {tuple(std)} must have equal length, std positive")
    mode = INTERPOLATIONS[interpolation]

    # Geometry and RandAugment run on the PIL image (PIL's affine offers bicubic, tensors' does not).
    steps: list[v2.Transform] = []
    if train:
        steps.append(v2.RandomResizedCrop((height, width), scale=scale, ratio=ratio, interpolation=mode))
        if hflip:
            steps.append(v2.RandomHorizontalFlip())
        if randaugment is not None:
            num_ops, magnitude = randaugment
            steps.append(RandAugment(num_ops, magnitude, interpolation=PIL_INTERPOLATIONS[interpolation]))
    else:
        scaled = eval_resize((height, width), crop_pct)
        if crop_mode_for((height, width), crop_mode) == "squash":  # each side to size / crop_pct
            steps.append(v2.Resize(list(scaled), interpolation=mode))
        elif height == width:  # the shorter side to size / crop_pct, keeping the aspect ratio
            steps.append(v2.Resize(scaled[0], interpolation=mode))
        else:
            steps.append(ResizeCovering(scaled, mode))
        steps.append(v2.CenterCrop((height, width)))
    # BatchNormalize's arithmetic either way: here per image (ToNormalized), or there on whole batches.
    steps.append(ToNormalized(mean, std) if normalize else v2.ToImage())  # uint8 tv_tensors.Image (3, H, W)
    return v2.Compose(steps)


class ResizeCovering:
    """Resize keeping the aspect ratio to the smallest image that covers `size` (height, width):
    timm's ResizeKeepRatio(size, longest=0), its "center" crop mode for a non-square input, with its
    rounding (each side divided by the smaller of the two ratios, rounded)."""

    def __init__(self, size: tuple[int, int], interpolation: InterpolationMode) -> None:
        self.size, self.interpolation = size, interpolation

    def __call__(self, image: Any) -> Any:
        height, width = v2.functional.get_size(image)
        ratio = min(height / self.size[0], width / self.size[1])
        size = [round(height / ratio), round(width / ratio)]
        return v2.functional.resize(image, size, interpolation=self.interpolation)


class BatchNormalize:
    """uint8 images (..., 3, H, W) -> float32 normalised by mean/std: the last two steps of
    build_transforms, the same operations in the same order, so a batch normalised here (on the model's
    device, after a quarter of the bytes crossed from the loader) has exactly the numbers of images
    normalised one by one."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.steps = [
            v2.ToDtype(torch.float32, scale=True),  # uint8 [0, 255] -> float [0, 1]
            v2.Normalize(mean=[float(m) for m in mean], std=[float(s) for s in std]),
        ]

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        for step in self.steps:
            images = step(images)
        return images.as_subclass(torch.Tensor)


class ToNormalized:
    """PIL image (or uint8 (C, H, W) tensor) -> float (C, H, W), (x / 255 - mean) / std.

    The arithmetic of v2.ToImage, v2.ToDtype(float32, scale=True) and v2.Normalize in their order
    (multiply by 1/255, subtract, divide), so the output is bit for bit theirs, but in place on one
    contiguous copy, which is faster (bench/input_pipeline.py profiles the steps of a training transform).
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean = torch.tensor([float(m) for m in mean]).view(-1, 1, 1)
        self.std = torch.tensor([float(s) for s in std]).view(-1, 1, 1)

    def __call__(self, image: Image.Image | torch.Tensor) -> torch.Tensor:
        if isinstance(image, torch.Tensor):
            pixels = image.as_subclass(torch.Tensor)
        else:
            array = np.array(image)  # (H, W, C) or (H, W); a copy, writable
            pixels = torch.from_numpy(array[:, :, None] if array.ndim == 2 else array).permute(2, 0, 1)
        if pixels.dtype != torch.uint8:
            raise ValueError(f"ToNormalized expects uint8 pixels, got {pixels.dtype}")
        out = pixels.contiguous().to(torch.float32).mul_(1.0 / 255)
        return out.sub_(self.mean).div_(self.std)

    def __repr__(self) -> str:
        return f"ToNormalized(mean={self.mean.flatten().tolist()}, std={self.std.flatten().tolist()})"


class PreprocessingFields(Protocol):
    """What a model stores about its inputs (vitlab.model.Preprocessing); read only, so that a
    dataclass whose fields are narrower (interpolation as a Literal) still fits."""

    @property
    def mean(self) -> tuple[float, float, float]: ...
    @property
    def std(self) -> tuple[float, float, float]: ...
    @property
    def crop_pct(self) -> float: ...
    @property
    def interpolation(self) -> str: ...
    @property
    def crop_mode(self) -> str | None: ...


def random_erasing(probability: float) -> v2.RandomErasing:
    """timm's RandomErasing with `--reprob probability` and train.py's default `--remode pixel`: with
    that chance one rectangle of 2-33% of the area, aspect ratio log-uniform in [0.3, 1/0.3], becomes
    standard-normal noise per pixel and channel, drawn on the normalised image (torchvision's
    value="random"; the same area and ratio ranges as timm's). timm's "const" mode would fill zeros
    (the mean colour) and "rand" one random colour per channel; vitlab offers the pixel mode only."""
    return v2.RandomErasing(p=probability, scale=(0.02, 1 / 3), ratio=(0.3, 1 / 0.3), value="random")


def resolve_preprocessing(
    base: Any,
    *,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    crop_pct: float | None = None,
    interpolation: str | None = None,
) -> Any:
    """`base` (a Preprocessing dataclass: the checkpoint's or the default) with the fields a run sets."""
    return dataclasses.replace(
        base,
        mean=mean if mean is not None else base.mean,
        std=std if std is not None else base.std,
        crop_pct=crop_pct if crop_pct is not None else base.crop_pct,
        interpolation=interpolation if interpolation is not None else base.interpolation,
    )


def train_transform(
    image_size: int | tuple[int, int], preprocessing: PreprocessingFields, augment: AugmentSpec
) -> v2.Compose:
    """Random crop + flip (+ RandAugment), then the Keras example's rotation and zoom and random
    erasing when asked."""
    transform = preprocessed_transforms(
        image_size,
        preprocessing,
        train=True,
        scale=augment.crop_scale,
        ratio=augment.crop_ratio,
        hflip=augment.hflip,
        randaugment=augment.randaugment,
    )
    keras_layers: list[torch.nn.Module] = []  # in the Keras example's order: resize, flip, rotation, zoom
    if augment.rotation:
        keras_layers.append(RandomRotation(augment.rotation / 360, augment.fill_mode))
    if augment.zoom:
        keras_layers.append(RandomZoom(augment.zoom, augment.zoom, augment.fill_mode))
    after = [*keras_layers, random_erasing(augment.reprob)] if augment.reprob else keras_layers
    return v2.Compose([transform, *after]) if after else transform


def eval_transform(
    image_size: int | tuple[int, int], preprocessing: PreprocessingFields, *, normalize: bool = True
) -> v2.Compose:
    """Resize + centre crop to `image_size`, normalised with the preprocessing's mean/std (with
    `normalize=False`, uint8: BatchNormalize(preprocessing.mean, preprocessing.std) finishes it)."""
    return preprocessed_transforms(
        image_size,
        preprocessing,
        train=False,
        crop_pct=preprocessing.crop_pct,
        crop_mode=preprocessing.crop_mode,
        normalize=normalize,
    )


def eval_resize(image_size: int | tuple[int, int], crop_pct: float) -> tuple[int, int]:
    """size / crop_pct, (height, width): what the evaluation resize makes before its centre crop (squash),
    or the smallest size its aspect-keeping resize covers (center)."""
    height, width = size_pair(image_size)
    return math.floor(height / crop_pct), math.floor(width / crop_pct)


def preprocessed_transforms(
    image_size: int | tuple[int, int], preprocessing: PreprocessingFields, *, train: bool, **options: Any
) -> v2.Compose:
    """build_transforms with the preprocessing's mean, std and interpolation; `options` are the rest."""
    return build_transforms(
        image_size,
        mean=preprocessing.mean,
        std=preprocessing.std,
        train=train,
        interpolation=preprocessing.interpolation,
        **options,
    )


def batch_mixing(mixup: float, cutmix: float, num_classes: int) -> v2.Transform | None:
    """Mixup and/or CutMix on whole batches (torchvision v2); with both, each batch picks one."""
    choices = []
    if mixup > 0:
        choices.append(v2.MixUp(alpha=mixup, num_classes=num_classes))
    if cutmix > 0:
        choices.append(v2.CutMix(alpha=cutmix, num_classes=num_classes))
    if not choices:
        return None
    return choices[0] if len(choices) == 1 else v2.RandomChoice(choices)
