"""Keras' RandomRotation and RandomZoom preprocessing layers, on one image tensor (C, H, W).

As Keras builds them (tf.keras.layers.experimental.preprocessing, TF 2.4, the version the Keras ViT
example was written for): each output pixel (x, y), in pixel-index coordinates, samples the input at
an affine map of itself, bilinearly; points outside the image are reflected about its border
(`fill_mode="reflect"`: d c b a | a b c d | d c b a) or read as 0 (`"constant"`).

RandomRotation(factor) turns about the image centre by an angle drawn uniformly from
+-factor x 2 pi. RandomZoom(height_factor, width_factor) draws one zoom per axis, each uniform in
[1 - factor, 1 + factor], and samples the input at centre + zoom x (output - centre): a zoom above 1
shows more of the image (zooms out).
"""

from __future__ import annotations

import math
import typing

import torch
import torch.nn.functional as F

from .augmentation import FillMode


def affine_warp(
    image: torch.Tensor, matrix: tuple[float, float, float, float, float, float], fill_mode: FillMode = "reflect"
) -> torch.Tensor:
    """Output (x, y) <- input (a0 x + a1 y + a2, b0 x + b1 y + b2), bilinear, for an image (C, H, W)."""
    if fill_mode not in typing.get_args(FillMode):
        raise ValueError(f"fill_mode must be 'reflect' or 'constant', got {fill_mode!r}")
    _, height, width = image.shape
    a0, a1, a2, b0, b1, b2 = matrix
    ys, xs = torch.meshgrid(
        torch.arange(height, dtype=torch.float32), torch.arange(width, dtype=torch.float32), indexing="ij"
    )
    source_x, source_y = a0 * xs + a1 * ys + a2, b0 * xs + b1 * ys + b2
    # grid_sample's [-1, 1] with align_corners=False puts pixel i's centre at (2 i + 1) / size - 1, and its
    # "reflection" reflects about the image's outer edges, as Keras' "reflect".
    grid = torch.stack([(2 * source_x + 1) / width - 1, (2 * source_y + 1) / height - 1], dim=-1)
    padding = "reflection" if fill_mode == "reflect" else "zeros"
    warped = F.grid_sample(
        image.unsqueeze(0).float(), grid.unsqueeze(0), mode="bilinear", padding_mode=padding, align_corners=False
    )
    return warped.squeeze(0).to(image.dtype)


class RandomRotation(torch.nn.Module):
    """Keras' RandomRotation(factor, fill_mode): a turn of up to +-factor x 360 degrees about the centre."""

    def __init__(self, factor: float, fill_mode: FillMode = "reflect") -> None:
        super().__init__()
        self.factor, self.fill_mode = factor, fill_mode

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        angle = self.factor * 2 * math.pi * (2 * float(torch.rand(())) - 1)
        _, height, width = image.shape
        cos, sin = math.cos(angle), math.sin(angle)
        x_offset = ((width - 1) - (cos * (width - 1) - sin * (height - 1))) / 2
        y_offset = ((height - 1) - (sin * (width - 1) + cos * (height - 1))) / 2
        return affine_warp(image, (cos, -sin, x_offset, sin, cos, y_offset), self.fill_mode)


class RandomZoom(torch.nn.Module):
    """Keras' RandomZoom(height_factor, width_factor, fill_mode): a zoom per axis, each in [1 - f, 1 + f]."""

    def __init__(self, height_factor: float, width_factor: float, fill_mode: FillMode = "reflect") -> None:
        super().__init__()
        self.height_factor, self.width_factor, self.fill_mode = height_factor, width_factor, fill_mode

    def draw(self) -> tuple[float, float]:
        """(height zoom, width zoom), drawn independently."""
        height = 1 + self.height_factor * (2 * float(torch.rand(())) - 1)
        width = 1 + self.width_factor * (2 * float(torch.rand(())) - 1)
        return height, width

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        zoom_y, zoom_x = self.draw()
        return zoom(image, zoom_y, zoom_x, self.fill_mode)


def zoom(image: torch.Tensor, zoom_y: float, zoom_x: float, fill_mode: FillMode = "reflect") -> torch.Tensor:
    _, height, width = image.shape
    x_offset, y_offset = (width - 1) / 2 * (1 - zoom_x), (height - 1) / 2 * (1 - zoom_y)
    return affine_warp(image, (zoom_x, 0.0, x_offset, 0.0, zoom_y, y_offset), fill_mode)
