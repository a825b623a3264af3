"""Position-embedding similarity (paper Fig. 7 centre).

The cosine similarity of each patch's position embedding with every other patch's. A model that
has learned the image topology shows, in the tile of patch (r, c), a bright spot at (r, c) that
fades with distance, often with row and column stripes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vitlab.model import VisionTransformer


def position_embedding_table(model: VisionTransformer) -> tuple[torch.Tensor, tuple[int, int]]:
    """The patch rows of E_pos, (N, D), and the grid they lie on, for learned, 2-D and sin-cos models."""
    config = model.config
    kind = config.pos_embed
    if getattr(config, "pos_embed_at", "input") == "every_layer":
        raise ValueError(
            "position-embedding similarity reads one E_pos; pos_embed_at='every_layer' has one "
            f"per layer ({config.depth}); pick a layer's table from model.layer_pos_embed"
        )
    if kind == "none" or model.pos_embed is None:
        detail = {
            "relative": "its relative position embeddings live in the attention layers, one per 1-D offset",
            "relative_bias": "its relative position biases live in the attention layers, one number per offset and head",
        }.get(kind, "it has no position embedding")
        raise ValueError(f"position-embedding similarity needs per-patch embeddings; pos_embed={kind!r}: {detail}")
    grid = config.grid_size
    with torch.no_grad():
        table = model.pos_embed(grid)[0, config.num_prefix_tokens :]  # (N, D)
    return table.detach().float().cpu(), grid


def position_similarity(table: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """(N, D) embeddings on an h x w grid -> (h, w, h, w): [r, c] is patch (r, c)'s similarity map."""
    if table.shape[0] != grid[0] * grid[1]:
        raise ValueError(f"{table.shape[0]} position embeddings do not fill a {grid[0]}x{grid[1]} grid")
    unit = F.normalize(table.float(), dim=-1)
    return (unit @ unit.t()).reshape(grid[0], grid[1], grid[0], grid[1])
