"""Axial-ViT's row and column attention (Appendix D.6) as token-to-token matrices, so that Attention
Rollout and the mean attention distance read an Axial-ViT as they read a ViT.

A row sub-block's weights mix the w tokens of each grid row: over all T = h*w tokens (row-major)
that is a block-diagonal (T, T) matrix R, one (w, w) block per row. A column sub-block's weights
mix the h tokens of each grid column: a (T, T) matrix C that is nonzero only between tokens of the
same column. One AxialBlock applies R, then C; its attention paths are C @ R, in which token
(i, j) reaches token (i', j') along exactly one path, through (i', j):

    (C @ R)[(i, j), (i', j')] = C[(i, j), (i', j)] * R[(i', j), (i', j')]

Each sub-block has its own residual connection (z' = z + MSA(LN(z))), so rollout takes the expanded
matrices as 2 x depth layers, R_1, C_1, R_2, C_2, ..., adding the identity to each as it does for
every ViT layer; with the residual left out it multiplies them into the C @ R products above.
The mean attention distance of an expanded R is the horizontal distance a row head attends over,
of an expanded C the vertical one: `attention_distance` on the expanded list gives per sub-block,
row then column, each head's distance in pixels.

Attention Flow reads the same 2 x depth expanded layers as its layered graph (each sub-block's
residual added as rollout adds it; a zero entry is no edge, so a row layer links only tokens of one
row). Class relevance (Chefer et al.) takes the gradient of the class score with respect to the row
and column weights themselves and expands it as the weights are expanded: entry (i, j), (i, j') of
R's gradient is the gradient of row i's weight (j, j'), and the entries outside the blocks, where R
is zero, contribute nothing to grad * A; its rule then runs over R_1, C_1, R_2, C_2, ... like rollout.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vitlab.model.axial import AxialAttention


def expand_axial_attention(attentions: Sequence[AxialAttention]) -> list[torch.Tensor]:
    """Per layer AxialAttention (row (B, h, heads, w, w), column (B, w, heads, h, h)) ->
    [R_1, C_1, R_2, C_2, ...], each (B, heads, T, T) over the T = h*w tokens in row-major order,
    in the order the encoder applies them."""
    matrices = []
    for row, column in attentions:
        batch, height, heads, width, _ = row.shape
        if column.shape != (batch, width, heads, height, height):
            raise ValueError(
                f"row weights {tuple(row.shape)} and column weights {tuple(column.shape)} are not of one grid"
            )
        tokens = height * width
        same_row = torch.eye(height, dtype=row.dtype, device=row.device)
        same_column = torch.eye(width, dtype=column.dtype, device=column.device)
        # R[b, k, (i, j), (i2, j2)] = row[b, i, k, j, j2] when i2 == i
        matrices.append(torch.einsum("bikjl,im->bkijml", row, same_row).reshape(batch, heads, tokens, tokens))
        # C[b, k, (i, j), (i2, j2)] = column[b, j, k, i, i2] when j2 == j
        matrices.append(torch.einsum("bjkil,jm->bkijlm", column, same_column).reshape(batch, heads, tokens, tokens))
    return matrices


def token_attention(attentions: Sequence[torch.Tensor | AxialAttention]) -> list[torch.Tensor]:
    """A model's `forward_with_attention` weights as (B, heads, T, T) matrices: a ViT's as they are,
    an Axial-ViT's expanded (two per layer, `expand_axial_attention`)."""
    if all(isinstance(weights, torch.Tensor) for weights in attentions):
        return list(attentions)  # type: ignore[arg-type]
    if all(isinstance(weights, AxialAttention) for weights in attentions):
        return expand_axial_attention(attentions)  # type: ignore[arg-type]
    raise ValueError("attention weights mix a ViT's and an Axial-ViT's")


def weight_tensors(attentions: Sequence[torch.Tensor | AxialAttention]) -> list[torch.Tensor]:
    """The tensors the encoder multiplied, in order: a ViT's per layer, an Axial-ViT's row then
    column per layer (for torch.autograd.grad, which takes tensors only)."""
    return [
        tensor for weights in attentions for tensor in (weights if isinstance(weights, AxialAttention) else (weights,))
    ]


def regroup(attentions: Sequence[torch.Tensor | AxialAttention], tensors: Sequence[torch.Tensor]) -> list:
    """`tensors` (one per `weight_tensors` entry, e.g. their gradients) in the layout of `attentions`."""
    grouped: list[torch.Tensor | AxialAttention] = []
    position = 0
    for weights in attentions:
        if isinstance(weights, AxialAttention):
            grouped.append(AxialAttention(tensors[position], tensors[position + 1]))
            position += 2
        else:
            grouped.append(tensors[position])
            position += 1
    return grouped
