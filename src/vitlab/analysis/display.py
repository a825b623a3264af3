"""Images and predictions as the figures show them: pixels back in [0, 1], one caption per image."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F

DISPLAY_SIZE = 224  # small inputs are enlarged to this many pixels on the short side for the figures


def display_images(images: torch.Tensor, mean: Iterable[float], std: Iterable[float]) -> torch.Tensor:
    """Undo the input normalisation: (B, C, H, W) -> (B, H, W, 3) in [0, 1], enlarged for display."""
    mean_t = torch.tensor(list(mean), dtype=torch.float32).view(1, -1, 1, 1)
    std_t = torch.tensor(list(std), dtype=torch.float32).view(1, -1, 1, 1)
    pixels = images.detach().float().cpu() * std_t + mean_t
    if pixels.shape[1] != 3:
        pixels = pixels.mean(dim=1, keepdim=True).expand(-1, 3, -1, -1)
    scale = max(1, math.ceil(DISPLAY_SIZE / min(pixels.shape[-2:])))
    if scale > 1:
        pixels = F.interpolate(pixels, scale_factor=scale, mode="bilinear", align_corners=False)
    return pixels.clamp(0.0, 1.0).permute(0, 2, 3, 1)


def captions(logits: torch.Tensor, config) -> list[str] | None:
    """ "pred 7 (93%)" per image; none for a model without a classifier (its logits are features)."""
    if config.num_classes < 2:
        return None
    probs = logits.float().softmax(dim=-1)
    top = probs.max(dim=-1)
    names = config.class_names or [str(k) for k in range(config.num_classes)]
    return [f"pred {names[int(k)]} ({float(p):.0%})" for p, k in zip(top.values, top.indices)]
