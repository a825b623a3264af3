"""Masked patch prediction (paper Sec. 4.6, Appendix B.1.2): self-supervised pre-training of a ViT.

Corruption (`corrupt_patches`). Of the N patch embeddings x_p^i E of each image, half (N/2 rounded
up, the same count for every image; the paper says "50% of patch embeddings" and is silent on
whether the share is exact) are chosen at random; each chosen one, independently, is replaced by a
learnable [mask] embedding (80%), replaced by the embedding of another patch drawn at random from
the whole batch (10%; the paper: "a random other patch embedding"), or kept as is (10%), as in BERT.
It acts on the output of the patch embedding, before the class token and E_pos are added (Eq. 1):
the paper corrupts "patch embeddings", and, as BERT's masked tokens keep their position embedding,
a [mask] embedding keeps its patch's E_pos, so the encoder knows which patch it stands for.

Targets, predicted for every corrupted patch (the kept 10% included) from its output token
LN(z_L^i) by the head of the target:
- `mean-color`, the paper's: the patch's mean colour at 3 bits per channel, one of 8^3 = 512 classes;
- `4x4`: the patch averaged down to 4x4 cells, each a 3-bit colour (16 predictions of 512 classes);
- `l2`: regression of the whole patch's normalised pixels (P*P*C numbers), mean squared error.
Colours are read from the pixels the model sees (the augmented crop), un-normalised with the
model's preprocessing mean and std; channel value v in [0, 1] falls in bin min(floor(8 v), 7), and
the class of (r, g, b) bins is 64 r + 8 g + b.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from vitlab.model.patch_embed import patches

CORRUPT_FRACTION = 0.5
REPLACE_WITH_MASK, REPLACE_WITH_RANDOM = 0.8, 0.1  # and 0.1 kept (Appendix B.1.2)
UNTOUCHED, MASKED, RANDOM, KEPT = 0, 1, 2, 3  # what corrupt_patches did to each patch
BITS = 3
COLOURS = (2**BITS) ** 3  # 512
CELLS = 4  # the 4x4 target's grid per patch


def corrupt_patches(
    tokens: torch.Tensor, mask_embedding: torch.Tensor, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Patch embeddings (B, N, D) -> (corrupted embeddings (B, N, D), kind (B, N): UNTOUCHED,
    MASKED, RANDOM or KEPT). Draws on the CPU from `generator` (None: torch's global one), so that a
    seeded run, and the fixed corruption of an evaluation, are the same on every device."""
    batch, count, dim = tokens.shape
    chosen = max(1, math.floor(count * CORRUPT_FRACTION + 0.5))
    order = torch.rand(batch, count, generator=generator).argsort(dim=1)
    corrupted = torch.zeros(batch, count, dtype=torch.bool)
    corrupted.scatter_(1, order[:, :chosen], True)
    draw = torch.rand(batch, count, generator=generator)
    kind = torch.where(
        draw < REPLACE_WITH_MASK,
        MASKED,
        torch.where(draw < REPLACE_WITH_MASK + REPLACE_WITH_RANDOM, RANDOM, KEPT),
    )
    kind = torch.where(corrupted, kind, UNTOUCHED)
    total = batch * count
    if total < 2:  # no other patch to borrow from: keep it
        kind = torch.where(kind == RANDOM, KEPT, kind)
    # Another patch of the batch: an index among the other total - 1, shifted past its own.
    own = torch.arange(total)
    source = torch.randint(0, max(total - 1, 1), (total,), generator=generator)
    source = source + (source >= own).long()
    source = source.clamp(max=total - 1).to(tokens.device)
    kind = kind.to(tokens.device)
    borrowed = tokens.reshape(total, dim)[source].reshape(batch, count, dim)
    out = torch.where((kind == RANDOM)[..., None], borrowed, tokens)
    out = torch.where((kind == MASKED)[..., None], mask_embedding.to(tokens.dtype).expand_as(tokens), out)
    return out, kind


def colour_class(rgb: torch.Tensor) -> torch.Tensor:
    """(..., 3) values in [0, 1] -> (...) class in 0..511: 3 bits per channel, 64 r + 8 g + b."""
    levels = 2**BITS
    bins = (rgb.clamp(0.0, 1.0) * levels).floor().clamp(max=levels - 1).long()
    return bins[..., 0] * levels * levels + bins[..., 1] * levels + bins[..., 2]


def mean_colour_target(pixels: torch.Tensor, patch: int) -> torch.Tensor:
    """Pixels in [0, 1] (B, 3, H, W) -> each patch's 3-bit mean colour (B, N)."""
    return colour_class(patches(pixels, patch).mean(dim=(3, 4)))


def downsized_target(pixels: torch.Tensor, patch: int) -> torch.Tensor:
    """Pixels in [0, 1] (B, 3, H, W) -> each patch averaged to 4x4 cells of 3-bit colour (B, N, 16),
    cells in row-major order."""
    tiles = patches(pixels, patch)
    batch, count, channels, _, _ = tiles.shape
    cell = patch // CELLS
    cells = tiles.reshape(batch, count, channels, CELLS, cell, CELLS, cell).mean(dim=(4, 6))
    return colour_class(cells.permute(0, 1, 3, 4, 2).reshape(batch, count, CELLS * CELLS, channels))


class TargetHead(nn.Module):
    """One target's prediction from the output tokens, its loss and its accuracy (over the corrupted
    patches). Subclasses set `outputs` and the target."""

    def __init__(self, dim: int, outputs: int) -> None:
        super().__init__()
        self.predict = nn.Linear(dim, outputs)

    def target(self, images: torch.Tensor, pixels: torch.Tensor, patch: int) -> torch.Tensor:
        raise NotImplementedError

    def loss_and_hits(self, tokens: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens (M, D) of the corrupted patches and their targets -> (mean loss, hits per prediction)."""
        raise NotImplementedError


class ColourClasses(TargetHead):
    """`mean-color` (cells=1) and `4x4` (cells=16): 512-way cross-entropy per cell."""

    def __init__(self, dim: int, cells: int, make_target: Callable[[torch.Tensor, int], torch.Tensor]) -> None:
        super().__init__(dim, cells * COLOURS)
        self.cells, self.make_target = cells, make_target

    def target(self, images: torch.Tensor, pixels: torch.Tensor, patch: int) -> torch.Tensor:
        return self.make_target(pixels, patch).reshape(pixels.shape[0], -1, self.cells)  # (B, N, cells)

    def loss_and_hits(self, tokens: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.predict(tokens).float().reshape(-1, COLOURS)  # (M * cells, 512)
        target = target.reshape(-1)
        return F.cross_entropy(logits, target), (logits.argmax(dim=1) == target).float()


class PatchRegression(TargetHead):
    """`l2`: the patch's normalised pixels; its accuracy is that of the 3-bit mean colour of the
    prediction (un-normalised), so that it compares with the other targets."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, dim: int, patch: int, channels: int, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__(dim, patch * patch * channels)
        self.patch, self.channels = patch, channels
        self.register_buffer("mean", mean, persistent=False)
        self.register_buffer("std", std, persistent=False)

    def target(self, images: torch.Tensor, pixels: torch.Tensor, patch: int) -> torch.Tensor:
        return patches(images, patch).flatten(2)  # (B, N, C*P*P), channel-major

    def loss_and_hits(self, tokens: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        predicted = self.predict(tokens).float()
        loss = F.mse_loss(predicted, target.float())
        shape = (-1, self.channels, self.patch * self.patch)

        def colour(values: torch.Tensor) -> torch.Tensor:
            return colour_class(values.reshape(shape).mean(dim=2) * self.std + self.mean)

        return loss, (colour(predicted) == colour(target)).float()


class MaskedPatchHead(nn.Module):
    """The [mask] embedding and the target's head: the parameters masked patch prediction adds to a ViT."""

    def __init__(self, dim: int, target: TargetHead) -> None:
        super().__init__()
        self.mask_embedding = nn.Parameter(torch.zeros(dim))
        nn.init.normal_(self.mask_embedding, std=0.02)  # BERT's initialiser range
        self.target = target
