"""What a training run's augmentation is (its `augment` section): the settings, declared once each,
that transforms.py and the device pipeline (device_decode.py) apply. Nothing here imports torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vitlab.config_fields import Range
from vitlab.config_options import option

FillMode = Literal["reflect", "constant"]  # what rotation and zoom show beyond the border (keras_augment.py)


@dataclass
class AugmentSpec:
    """Training-time augmentation and the loss's label treatment (a training run's `augment` section)."""

    crop_scale: tuple[float, float] = option((0.05, 1.0), help="inception crop area range (vit_jax's default)")
    crop_ratio: tuple[float, float] = option((3 / 4, 4 / 3), help="inception crop aspect-ratio range")
    hflip: bool = option(True, help="random horizontal flip")
    randaugment: tuple[int, int] | None = option(None, help="RandAugment's (number of ops, magnitude), e.g. (2, 10)")
    # Keras' RandomRotation and RandomZoom (keras_augment.py), after the crop, flip and normalisation.
    rotation: float = option(0.0, help="degrees either way (Keras' factor x 360)", range=Range(0, 180, unit="degrees"))
    zoom: float = option(0.0, help="a zoom per axis, each uniform in 1 +- zoom", range=Range(0, 1, high_open=True))
    fill_mode: FillMode = option("reflect", help="what rotation and zoom show beyond the border")
    reprob: float = option(
        0.0,
        flags=("--reprob",),
        metavar="P",
        help="random erasing probability (timm's, pixel mode)",
        range=Range(0, 1),
    )  # timm's --reprob: one random rectangle of the normalised image becomes per-pixel normal noise
    repeats: int = option(
        1,
        flags=("--repeats",),
        metavar="N",
        help="repeated augmentation (DeiT): each image N times in a row, differently augmented",
        range=Range(1),
    )  # the epoch keeps its length, as DeiT's RASampler does (training/loader.py)
    mixup: float = option(0.0, help="mixup's Beta(alpha, alpha); 0 turns it off", range=Range(0))
    cutmix: float = option(0.0, help="cutmix's Beta(alpha, alpha); 0 turns it off", range=Range(0))
    label_smoothing: float = option(0.0, help="label smoothing", range=Range(0, 1, high_open=True))
