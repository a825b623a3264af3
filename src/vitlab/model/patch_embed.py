"""Eq. 1: split the image into P x P patches and project each linearly (x_p E)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .kernels import HALF, Conv2d, compiled_cpu_inference, eager_onednn, native, onednn_linear


def patches(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, N, C, P, P): the P x P patches x_p in row-major order (H/P rows of W/P)."""
    batch, channels, _, _ = images.shape
    grid = images.unfold(2, patch, patch).unfold(3, patch, patch)  # (B, C, H/P, W/P, P, P)
    return grid.permute(0, 2, 3, 1, 4, 5).reshape(batch, -1, channels, patch, patch)


class PatchEmbedding(nn.Module):
    """A convolution with kernel = stride = P is exactly a linear map of each flattened patch.

    Where the linear layers run through oneDNN (kernels.eager_onednn: eager inference on the CPU), the
    map runs as that: the patches copied out (B, N, C P P) and one GEMM by the kernel read as a
    (D, C P P) matrix, bias in its epilogue. 2 threads, two runs: bf16 2.8-3.2 ms against oneDNN's
    convolution's 4.2-4.8 (S/16, batch 16), 3.3-4.6 against 7.8-8.0 (Ti/16, batch 32), 2.5-2.8 against
    3.7-4.7 (B/16, batch 8); fp32 5.8 against 6.3, 6.5 against 10.5, 5.1 against 5.8.

    Inductor's frozen bf16 / fp16 inference graphs on a CPU with native kernels (optimize_for_inference)
    take the same GEMM, with the weight prepacked: interleaved against the convolution, whole
    models 1.0-3.6% faster (S/16 batch 16, Ti/16 batch 32, B/16 batch 8; 2 threads). In fp32 they keep
    the convolution: the GEMM ran 1% slower there (S/16, Ti/16).
    """

    def __init__(self, patch_size: int, in_channels: int, dim: int) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.proj = Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size)

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

    def compiled_gemm(self, images: torch.Tensor) -> bool:
        """Whether Inductor, tracing bf16 / fp16 CPU inference, is given the GEMM (see the class)."""
        return (
            images.dtype in HALF
            and images.dtype == self.proj.weight.dtype
            and native(images.dtype)
            and compiled_cpu_inference(images)
        )

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """(B, C, H, W) -> tokens (B, N, D) in row-major patch order, and the grid (H/P, W/P)."""
        if not torch.compiler.is_compiling():
            self.check_input(images)
        compiled = self.compiled_gemm(images)
        if compiled or eager_onednn(images, self.proj.weight):
            grid = (images.shape[-2] // self.patch_size, images.shape[-1] // self.patch_size)
            flat = patches(images, self.patch_size).flatten(2)  # (B, N, C P P), the kernel's order
            weight = self.proj.weight.flatten(1)
            linear = F.linear if compiled else onednn_linear  # Inductor packs its own
            return linear(flat, weight, self.proj.bias), grid
        embedded = self.proj(images)  # (B, D, H/P, W/P)
        grid = (embedded.shape[-2], embedded.shape[-1])
        return embedded.flatten(2).transpose(1, 2), grid
