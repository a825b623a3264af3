"""RandAugment as timm defines `rand-m{M}-n{N}` (timm/data/auto_augment.py), the form AugReg and DeiT
recipes name as "RandAugment(2, 10)".

Each image gets N operations drawn at random (with replacement) from timm's 15, each applied with
probability 0.5 at magnitude M out of 10: an operation's argument is M/10 of its maximum (rotation
30 degrees, shear 0.3, translation 45% of the side, ...), with a random sign where the operation
has one. Magnitudes above 10 act as 10, as in timm unless its `mmax` option is given. torchvision's
RandAugment is another definition (its magnitude counts 31 bins, so 10 is a third of full strength,
and its operation set and strengths differ), so it is not used here.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image, ImageEnhance, ImageOps

log = logging.getLogger("vitlab")

MAX_LEVEL = 10.0  # timm's _LEVEL_DENOM: M is counted out of 10
FILL = (128, 128, 128)  # timm's fill for pixels an affine operation uncovers


def _affine(image: Image.Image, matrix: tuple[float, ...], resample: Image.Resampling, fill) -> Image.Image:
    # PIL maps each output pixel (x, y) to the input pixel (a x + b y + c, d x + e y + f).
    return image.transform(image.size, Image.Transform.AFFINE, matrix, resample=resample, fillcolor=fill)


def _solarize_add(image: Image.Image, add: int, threshold: int = 128) -> Image.Image:
    table = [min(255, value + add) if value < threshold else value for value in range(256)]
    return image.point(table * len(image.getbands()))


def _posterize(image: Image.Image, bits: int) -> Image.Image:
    return image if bits >= 8 else ImageOps.posterize(image, bits)


@dataclass(frozen=True)
class Operation:
    """One operation: its argument at level M (0-10), whether a random sign applies, and how it runs.

    The argument's type is the operation's own (degrees, bits, a factor, None), hence `Any` in `apply`.
    """

    level: Callable[[float], float | int | None]
    signed: bool
    apply: Callable[[Image.Image, Any, Image.Resampling, tuple[int, int, int]], Image.Image]


def _enhance(kind) -> Operation:
    # Factor 0.1 (M=0) to 1.9 (M=10); 1.0, unchanged, at M=5.
    return Operation(lambda m: m / MAX_LEVEL * 1.8 + 0.1, False, lambda im, f, r, fill: kind(im).enhance(f))


# timm's _RAND_TRANSFORMS, in its order, with its level-to-argument rules.
OPERATIONS: dict[str, Operation] = {
    "AutoContrast": Operation(lambda m: None, False, lambda im, a, r, fill: ImageOps.autocontrast(im)),
    "Equalize": Operation(lambda m: None, False, lambda im, a, r, fill: ImageOps.equalize(im)),
    "Invert": Operation(lambda m: None, False, lambda im, a, r, fill: ImageOps.invert(im)),
    "Rotate": Operation(
        lambda m: m / MAX_LEVEL * 30.0,
        True,
        lambda im, degrees, r, fill: im.rotate(degrees, resample=r, fillcolor=fill),
    ),
    "Posterize": Operation(lambda m: int(m / MAX_LEVEL * 4), False, lambda im, bits, r, fill: _posterize(im, bits)),
    "Solarize": Operation(
        lambda m: min(256, int(m / MAX_LEVEL * 256)),
        False,
        lambda im, threshold, r, fill: ImageOps.solarize(im, threshold),
    ),
    "SolarizeAdd": Operation(
        lambda m: min(128, int(m / MAX_LEVEL * 110)), False, lambda im, add, r, fill: _solarize_add(im, add)
    ),
    "Color": _enhance(ImageEnhance.Color),
    "Contrast": _enhance(ImageEnhance.Contrast),
    "Brightness": _enhance(ImageEnhance.Brightness),
    "Sharpness": _enhance(ImageEnhance.Sharpness),
    "ShearX": Operation(
        lambda m: m / MAX_LEVEL * 0.3, True, lambda im, s, r, fill: _affine(im, (1, s, 0, 0, 1, 0), r, fill)
    ),
    "ShearY": Operation(
        lambda m: m / MAX_LEVEL * 0.3, True, lambda im, s, r, fill: _affine(im, (1, 0, 0, s, 1, 0), r, fill)
    ),
    "TranslateXRel": Operation(
        lambda m: m / MAX_LEVEL * 0.45,
        True,
        lambda im, t, r, fill: _affine(im, (1, 0, t * im.size[0], 0, 1, 0), r, fill),
    ),
    "TranslateYRel": Operation(
        lambda m: m / MAX_LEVEL * 0.45,
        True,
        lambda im, t, r, fill: _affine(im, (1, 0, 0, 0, 1, t * im.size[1]), r, fill),
    ),
}


class RandAugment:
    """`num_ops` operations per image at `magnitude` (out of 10), each applied with probability `prob`.

    Draws from Python's `random`, which the training loader seeds per sample, so runs repeat exactly.
    """

    def __init__(
        self,
        num_ops: int = 2,
        magnitude: float = 10,
        *,
        prob: float = 0.5,
        interpolation: Image.Resampling = Image.Resampling.BICUBIC,
        fill: tuple[int, int, int] = FILL,
        operations: Sequence[str] | None = None,
    ) -> None:
        if num_ops < 1 or magnitude < 0 or not 0.0 <= prob <= 1.0:
            raise ValueError(
                f"RandAugment needs num_ops >= 1, magnitude >= 0 and prob in [0, 1], got {num_ops}, {magnitude}, {prob}"
            )
        unknown = sorted(set(operations or ()) - set(OPERATIONS))
        if unknown:
            raise ValueError(f"unknown RandAugment operation {unknown[0]!r}; operations: {', '.join(OPERATIONS)}")
        if magnitude > MAX_LEVEL:
            log.info("RandAugment magnitude %g acts as %g, the maximum (as in timm)", magnitude, MAX_LEVEL)
        self.num_ops, self.prob, self.interpolation, self.fill = num_ops, prob, interpolation, fill
        self.magnitude = min(float(magnitude), MAX_LEVEL)
        self.operations = tuple(operations or OPERATIONS)

    def strength(self, name: str) -> float | int | None:
        """The operation's argument before any random sign (degrees, shear, fraction of the side, ...)."""
        return OPERATIONS[name].level(self.magnitude)

    def draw(self) -> list[tuple[str, Any]]:
        """The operations one image gets, with their signed arguments, drawn from Python's `random`."""
        drawn = []
        for name in random.choices(self.operations, k=self.num_ops):
            if random.random() >= self.prob:
                continue
            operation = OPERATIONS[name]
            argument = operation.level(self.magnitude)
            if operation.signed and random.random() < 0.5:
                assert argument is not None  # a signed operation's level is a number
                argument = -argument
            drawn.append((name, argument))
        return drawn

    def __call__(self, image: Image.Image) -> Image.Image:
        for name, argument in self.draw():
            image = OPERATIONS[name].apply(image, argument, self.interpolation, self.fill)
        return image

    def __repr__(self) -> str:
        return f"RandAugment(num_ops={self.num_ops}, magnitude={self.magnitude:g}, prob={self.prob})"
