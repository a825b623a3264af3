"""Eq. 1: split the image into P x P patches and project each linearly (x_p E)."""

from __future__ import annotations

import torch
from torch import nn


def patches(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, N, C, P, P): the P x P patches x_p in row-major order (H/P rows of W/P).
    N is spelled out rather than inferred, so that an empty batch (a process's share of an uneven
    evaluation split) keeps its shape."""
    batch, channels, _, _ = images.shape
    grid = images.unfold(2, patch, patch).unfold(3, patch, patch)  # (B, C, H/P, W/P, P, P)
    count = grid.shape[2] * grid.shape[3]
    return grid.permute(0, 2, 3, 1, 4, 5).reshape(batch, count, channels, patch, patch)


class PatchEmbedding(nn.Module):
    """A convolution with kernel = stride = P is exactly a linear map of each flattened patch, E."""

    def __init__(self, patch_size: int, in_channels: int, dim: int, bias: bool = True) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.proj = nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size, bias=bias)

    def check_input(self, images: torch.Tensor) -> None:
        if images.dim() != 4:
            raise ValueError(
                f"expected images of shape (batch, {self.in_channels}, height, width), got {tuple(images.shape)}"
            )
        if images.shape[1] != self.in_channels:
            raise ValueError(
                f"expected {self.in_channels} channels, got {images.shape[1]} (input shape {tuple(images.shape)})"
            )
        height, width = images.shape[-2:]
        if height % self.patch_size or width % self.patch_size:
            raise ValueError(f"image size {height}x{width} is not divisible by patch size {self.patch_size}")

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """(B, C, H, W) -> tokens (B, N, D) in row-major patch order, and the grid (H/P, W/P)."""
        if not torch.compiler.is_compiling():
            self.check_input(images)
        embedded = self.proj(images)  # (B, D, H/P, W/P)
        grid = (embedded.shape[-2], embedded.shape[-1])
        return embedded.flatten(2).transpose(1, 2), grid
