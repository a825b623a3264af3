"""Mean attention distance (paper Fig. 7 right, Appendix D.7).

For every head, the distance in pixels between a query patch and the patches it attends to,
weighted by the attention weights, averaged over queries and images. It is the transformer's
"receptive field size": small for heads that act locally like early convolutions, large for heads
that integrate the whole image.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def patch_distances(grid: tuple[int, int], patch_size: int) -> torch.Tensor:
    """(N, N) Euclidean distances in pixels between the centres of the patches of a grid (row-major)."""
    rows, cols = torch.meshgrid(
        torch.arange(grid[0], dtype=torch.float64), torch.arange(grid[1], dtype=torch.float64), indexing="ij"
    )
    centres = torch.stack([rows.flatten(), cols.flatten()], dim=1) * patch_size  # (N, 2)
    return torch.cdist(centres, centres)


def attention_distance(
    attentions: Sequence[torch.Tensor], grid: tuple[int, int], patch_size: int, num_prefix_tokens: int
) -> torch.Tensor:
    """Per-layer attention (B, heads, T, T) -> mean attention distance (B, layers, heads) in pixels.

    The class token has no place in the image, so only patch-to-patch weights count; they are
    renormalised to sum to one per query, so that a head that looks mostly at the class token is
    measured by where its remaining attention goes.
    """
    distances = patch_distances(grid, patch_size)  # (N, N)
    per_layer = []
    for weights in attentions:
        patches = weights[:, :, num_prefix_tokens:, num_prefix_tokens:].double()  # (B, heads, N, N)
        if patches.shape[-1] != distances.shape[0]:
            raise ValueError(f"attention over {patches.shape[-1]} patches does not match a {grid[0]}x{grid[1]} grid")
        patches = patches / patches.sum(dim=-1, keepdim=True).clamp_min(1e-12)
        per_query = (patches * distances.to(patches.device)).sum(dim=-1)  # (B, heads, N)
        per_layer.append(per_query.mean(dim=-1))
    return torch.stack(per_layer, dim=1).float()
