"""RandAugment's operations (randaugment.py) on uint8 (3, H, W) tensors, for the device pipeline.

The arguments are those RandAugment.draw gives (degrees, shear, fraction of the side, bits, factor), and
each operation follows PIL's definition: the colour ones through torchvision's tensor functions, which
mirror PIL's (ImageEnhance's blends, ImageOps' autocontrast, equalize, posterize, solarize), the
geometric ones through PIL's own affine matrices (output pixel centre -> input point), sampled with
grid_sample. Pixel values differ from PIL's by rounding (torchvision truncates blends, PIL rounds) and,
for the geometric ones, by the bicubic kernel (torch's a = -0.75, PIL's a = -0.5): tests bound both.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional as nnf
from torchvision.transforms.v2 import functional as F

Matrix = tuple[float, float, float, float, float, float]


def affine(image: torch.Tensor, matrix: Matrix, interpolation: str, fill: tuple[int, int, int]) -> torch.Tensor:
    """PIL's Image.transform(AFFINE, matrix): output pixel (x, y) shows the input at
    (a x + b y + c, d x + e y + f), pixel centres at +0.5; points outside the image get `fill`."""
    _, height, width = image.shape
    a, b, c, d, e, f = matrix
    ys, xs = torch.meshgrid(
        torch.arange(height, device=image.device, dtype=torch.float32) + 0.5,
        torch.arange(width, device=image.device, dtype=torch.float32) + 0.5,
        indexing="ij",
    )
    x_in, y_in = a * xs + b * ys + c, d * xs + e * ys + f
    grid = torch.stack([2 * x_in / width - 1, 2 * y_in / height - 1], dim=-1)[None]  # (1, H, W, 2), align_corners=False
    mode = {"bicubic": "bicubic", "bilinear": "bilinear"}.get(interpolation, "nearest")
    out = nnf.grid_sample(image[None].float(), grid, mode=mode, padding_mode="border", align_corners=False)[0]
    outside = (x_in < 0) | (x_in >= width) | (y_in < 0) | (y_in >= height)
    colour = torch.tensor(fill, device=image.device, dtype=out.dtype).view(3, 1, 1)
    out = torch.where(outside, colour, out)
    return out.round_().clamp_(0, 255).to(torch.uint8)


def rotation_matrix(degrees: float, width: int, height: int) -> Matrix:
    """PIL's Image.rotate(degrees) about the centre (counter-clockwise), as the matrix it transforms with."""
    angle = -math.radians(degrees)
    a, b = round(math.cos(angle), 15), round(math.sin(angle), 15)
    d, e = round(-math.sin(angle), 15), round(math.cos(angle), 15)
    cx, cy = width / 2, height / 2
    return a, b, a * -cx + b * -cy + cx, d, e, d * -cx + e * -cy + cy


def _rotate(image: torch.Tensor, degrees: float, interpolation: str, fill) -> torch.Tensor:
    if degrees % 360 == 0:  # PIL returns a copy
        return image
    return affine(image, rotation_matrix(degrees, image.shape[-1], image.shape[-2]), interpolation, fill)


def _solarize(image: torch.Tensor, threshold: int) -> torch.Tensor:
    return image if threshold > 255 else F.solarize(image, threshold)  # 256: PIL inverts nothing


def _solarize_add(image: torch.Tensor, add: int, threshold: int = 128) -> torch.Tensor:
    return torch.where(image < threshold, (image.to(torch.int16) + add).clamp_(max=255).to(torch.uint8), image)


def _posterize(image: torch.Tensor, bits: int) -> torch.Tensor:
    return image if bits >= 8 else F.posterize(image, bits)


Operation = Callable[[torch.Tensor, Any, str, tuple[int, int, int]], torch.Tensor]

TENSOR_OPERATIONS: dict[str, Operation] = {
    "AutoContrast": lambda im, a, r, fill: F.autocontrast(im),
    "Equalize": lambda im, a, r, fill: F.equalize(im),
    "Invert": lambda im, a, r, fill: F.invert(im),
    "Rotate": _rotate,
    "Posterize": lambda im, bits, r, fill: _posterize(im, bits),
    "Solarize": lambda im, threshold, r, fill: _solarize(im, threshold),
    "SolarizeAdd": lambda im, add, r, fill: _solarize_add(im, add),
    "Color": lambda im, f, r, fill: F.adjust_saturation(im, f),
    "Contrast": lambda im, f, r, fill: F.adjust_contrast(im, f),
    "Brightness": lambda im, f, r, fill: F.adjust_brightness(im, f),
    "Sharpness": lambda im, f, r, fill: F.adjust_sharpness(im, f),
    "ShearX": lambda im, s, r, fill: affine(im, (1, s, 0, 0, 1, 0), r, fill),
    "ShearY": lambda im, s, r, fill: affine(im, (1, 0, 0, s, 1, 0), r, fill),
    "TranslateXRel": lambda im, t, r, fill: affine(im, (1, 0, t * im.shape[-1], 0, 1, 0), r, fill),
    "TranslateYRel": lambda im, t, r, fill: affine(im, (1, 0, 0, 0, 1, t * im.shape[-2]), r, fill),
}


def apply_operations(
    image: torch.Tensor, operations: tuple[tuple[str, Any], ...], interpolation: str, fill: tuple[int, int, int]
) -> torch.Tensor:
    """The operations RandAugment.draw gave one image, in order."""
    for name, argument in operations:
        image = TENSOR_OPERATIONS[name](image, argument, interpolation, fill)
    return image
