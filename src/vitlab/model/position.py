"""Position information (Eq. 1's E_pos and the paper's Table 8 alternatives).

- learned: one learned vector per token (the paper's default, "1-D");
- 2d: learned X and Y embeddings of D/2 each, concatenated per patch (Table 8, "2-D");
- sincos: fixed 2-D sine-cosine embedding (big_vision's posemb_sincos_2d);
- relative: the paper's relative embedding (Table 8 "relative", Appendix D.4): 1-D relative
  attention, a learned embedding per offset p_q - p_k that each query attends to, the resulting
  logits added to the attention logits; it lives in the attention layers, see
  RelativeAttentionEmbedding;
- relative_bias: a content-independent learned bias per head and 2-D offset (as BEiT), not the
  paper's; see RelativePositionBias;
- none: no position information (Table 8, "no pos. emb.").

Where E_pos is added (Table 8's columns, ViTConfig.pos_embed_at) is the model's business (vit.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def resample_grid(
    grid: torch.Tensor, new_size: tuple[int, int], mode: str = "bicubic", antialias: bool = True
) -> torch.Tensor:
    """Resample a (C, H, W) or (B, C, H, W) grid to new_size.

    bicubic / bilinear follow timm's resample_abs_pos_embed (align_corners=False, antialias as
    given); linear_zoom is vit_jax's scipy.ndimage.zoom(order=1), i.e. bilinear with the corner
    samples aligned and no antialiasing; bicubic_aligned is torchvision's interpolate_embeddings
    (bicubic, align_corners=True, no antialiasing).
    """
    squeeze = grid.dim() == 3
    if squeeze:
        grid = grid.unsqueeze(0)
    if tuple(grid.shape[-2:]) != tuple(new_size):
        dtype = grid.dtype
        grid = grid.float()
        if mode == "linear_zoom":
            # scipy's zoom interpolates in float64; so does this, to give vit_jax's table exactly.
            grid = F.interpolate(grid.double(), size=new_size, mode="bilinear", align_corners=True)
        elif mode == "bicubic_aligned":
            grid = F.interpolate(grid, size=new_size, mode="bicubic", align_corners=True)
        elif mode in ("bicubic", "bilinear"):
            grid = F.interpolate(grid, size=new_size, mode=mode, antialias=antialias, align_corners=False)
        else:
            raise ValueError(f"unknown resample mode {mode!r}")
        grid = grid.to(dtype)
    return grid.squeeze(0) if squeeze else grid


def resample_pos_embed(
    pos_embed: torch.Tensor,
    new_grid: tuple[int, int],
    old_grid: tuple[int, int] | None = None,
    num_prefix_tokens: int = 1,
    mode: str = "bicubic",
    antialias: bool = True,
) -> torch.Tensor:
    """Resample a learned (1, prefix + h*w, D) position embedding to a new patch grid in 2-D.

    The prefix (class token) slots are kept as they are (paper Sec. 3.2: "2D interpolation of the
    pre-trained position embeddings, according to their location in the original image").
    """
    prefix, patch_pos = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    num_old = patch_pos.shape[1]
    if old_grid is None:
        side = math.isqrt(num_old)
        if side * side != num_old:
            raise ValueError(f"cannot infer a square grid from {num_old} position embeddings; give old_grid")
        old_grid = (side, side)
    if old_grid[0] * old_grid[1] != num_old:
        raise ValueError(f"old grid {old_grid} does not hold {num_old} position embeddings")
    if tuple(old_grid) == tuple(new_grid):
        return pos_embed
    dim = patch_pos.shape[-1]
    grid = patch_pos.reshape(1, old_grid[0], old_grid[1], dim).permute(0, 3, 1, 2)  # (1, D, h, w)
    grid = resample_grid(grid, new_grid, mode=mode, antialias=antialias)
    patch_pos = grid.permute(0, 2, 3, 1).reshape(1, new_grid[0] * new_grid[1], dim)
    return torch.cat([prefix, patch_pos], dim=1)


def sincos_2d(grid: tuple[int, int], dim: int, temperature: float = 10_000.0) -> torch.Tensor:
    """Fixed 2-D sine-cosine embedding, (h*w, D), as big_vision's posemb_sincos_2d."""
    y, x = torch.meshgrid(
        torch.arange(grid[0], dtype=torch.float32), torch.arange(grid[1], dtype=torch.float32), indexing="ij"
    )
    omega = 1.0 / temperature ** (torch.arange(dim // 4, dtype=torch.float32) / (dim // 4 - 1 or 1))
    y = y.flatten()[:, None] * omega[None, :]
    x = x.flatten()[:, None] * omega[None, :]
    return torch.cat([x.sin(), x.cos(), y.sin(), y.cos()], dim=1)


class LearnedPositionEmbedding(nn.Module):
    """E_pos in R^{(N+1) x D}; resampled in 2-D when the patch grid differs from training."""

    def __init__(self, grid: tuple[int, int], dim: int, num_prefix_tokens: int, mode: str, antialias: bool):
        super().__init__()
        self.grid: tuple[int, int] = (grid[0], grid[1])
        self.num_prefix_tokens = num_prefix_tokens
        self.mode, self.antialias = mode, antialias
        self.weight = nn.Parameter(torch.empty(1, num_prefix_tokens + grid[0] * grid[1], dim))
        nn.init.normal_(self.weight, std=0.02)

    @torch.no_grad()
    def resize_grid(self, grid: tuple[int, int]) -> None:
        """Make `grid` the native one, resampling the stored table (used when loading weights)."""
        self.weight = nn.Parameter(self.forward(grid))
        self.grid = (grid[0], grid[1])

    def forward(self, grid: tuple[int, int]) -> torch.Tensor:
        """(1, prefix + h*w, D) for the given patch grid."""
        return resample_pos_embed(self.weight, grid, self.grid, self.num_prefix_tokens, self.mode, self.antialias)


class XYPositionEmbedding(nn.Module):
    """Table 8's "2-D": learned row (Y) and column (X) embeddings of D/2 each, concatenated."""

    def __init__(self, grid: tuple[int, int], dim: int, num_prefix_tokens: int, mode: str, antialias: bool):
        super().__init__()
        self.grid = tuple(grid)
        self.mode, self.antialias = mode, antialias
        self.row_embed = nn.Parameter(torch.empty(grid[0], dim // 2))
        self.col_embed = nn.Parameter(torch.empty(grid[1], dim // 2))
        # The class token has no location: it gets its own learned vector.
        self.prefix_embed = nn.Parameter(torch.zeros(1, num_prefix_tokens, dim))
        nn.init.normal_(self.row_embed, std=0.02)
        nn.init.normal_(self.col_embed, std=0.02)

    def _resample_axis(self, table: torch.Tensor, length: int) -> torch.Tensor:
        if table.shape[0] == length:
            return table
        grid = table.t().unsqueeze(-1)  # (D/2, L, 1): resample along one axis only
        return resample_grid(grid, (length, 1), self.mode, self.antialias).squeeze(-1).t()

    @torch.no_grad()
    def resize_grid(self, grid: tuple[int, int]) -> None:
        self.row_embed = nn.Parameter(self._resample_axis(self.row_embed, grid[0]))
        self.col_embed = nn.Parameter(self._resample_axis(self.col_embed, grid[1]))
        self.grid = tuple(grid)

    def forward(self, grid: tuple[int, int]) -> torch.Tensor:
        rows = self._resample_axis(self.row_embed, grid[0])  # (h, D/2)
        cols = self._resample_axis(self.col_embed, grid[1])  # (w, D/2)
        patch_pos = torch.cat(
            [cols[None, :, :].expand(grid[0], -1, -1), rows[:, None, :].expand(-1, grid[1], -1)], dim=-1
        ).reshape(1, grid[0] * grid[1], -1)
        return torch.cat([self.prefix_embed, patch_pos], dim=1)


class SinCosPositionEmbedding(nn.Module):
    """Fixed (not learned) 2-D sine-cosine embedding; computed for any grid, so no resampling."""

    def __init__(self, dim: int, num_prefix_tokens: int):
        super().__init__()
        self.dim = dim
        self.num_prefix_tokens = num_prefix_tokens

    def forward(self, grid: tuple[int, int]) -> torch.Tensor:
        patch_pos = sincos_2d(grid, self.dim)[None]
        prefix = patch_pos.new_zeros(1, self.num_prefix_tokens, self.dim)
        return torch.cat([prefix, patch_pos], dim=1)


class RelativePositionBias(nn.Module):
    """Learned attention-logit bias per head and 2-D relative offset between patches.

    As in BEiT, three extra entries cover class->patch, patch->class and class->class. For another
    grid the offset table is resampled in 2-D like an absolute embedding.
    """

    def __init__(self, grid: tuple[int, int], num_heads: int, num_prefix_tokens: int, mode: str, antialias: bool):
        super().__init__()
        self.grid = tuple(grid)
        self.num_prefix_tokens = num_prefix_tokens
        self.mode, self.antialias = mode, antialias
        self.table = nn.Parameter(torch.zeros(num_heads, 2 * grid[0] - 1, 2 * grid[1] - 1))
        self.prefix_bias = nn.Parameter(torch.zeros(num_heads, 3))
        nn.init.trunc_normal_(self.table, std=0.02)

    def _table_for(self, grid: tuple[int, int]) -> torch.Tensor:
        span = (2 * grid[0] - 1, 2 * grid[1] - 1)
        return resample_grid(self.table, span, self.mode, self.antialias)

    @torch.no_grad()
    def resize_grid(self, grid: tuple[int, int]) -> None:
        self.table = nn.Parameter(self._table_for(grid))
        self.grid = tuple(grid)

    def forward(self, grid: tuple[int, int]) -> torch.Tensor:
        """(heads, T, T) additive bias for T = prefix + h*w tokens."""
        table = self._table_for(grid)
        rows = torch.arange(grid[0], device=table.device).repeat_interleave(grid[1])
        cols = torch.arange(grid[1], device=table.device).repeat(grid[0])
        d_row = rows[:, None] - rows[None, :] + grid[0] - 1  # (N, N), in [0, 2h-2]
        d_col = cols[:, None] - cols[None, :] + grid[1] - 1
        patch_bias = table[:, d_row, d_col]  # (heads, N, N)
        if not self.num_prefix_tokens:
            return patch_bias
        heads, n = patch_bias.shape[0], patch_bias.shape[-1]
        bias = patch_bias.new_empty(heads, n + 1, n + 1)
        bias[:, 1:, 1:] = patch_bias
        bias[:, 0, 1:] = self.prefix_bias[:, 0:1]  # class token attending to patches
        bias[:, 1:, 0] = self.prefix_bias[:, 1:2]  # patches attending to the class token
        bias[:, 0, 0] = self.prefix_bias[:, 2]
        return bias


class RelativeAttentionEmbedding(nn.Module):
    """Appendix D.4's "1-dimensional Relative Attention": for a query at sequence position p_q and a
    key at p_k, the offset p_q - p_k has a learned embedding r (head_dim wide, one per offset as in
    Shaw et al. 2018). An extra attention with the original queries and these embeddings as keys
    gives logits q . r * scale, added to the content logits before the softmax (attention.py).

    Positions are the 1-D token sequence (class token first, then patches in raster order), so the
    table holds 2T - 1 offsets for T tokens. A raster offset has no meaning on another grid (the
    same offset is another 2-D displacement), so this table is never resampled: another grid is refused.
    """

    def __init__(self, grid: tuple[int, int], head_dim: int, num_prefix_tokens: int):
        super().__init__()
        self.grid = tuple(grid)
        self.num_tokens = num_prefix_tokens + grid[0] * grid[1]
        self.weight = nn.Parameter(torch.empty(2 * self.num_tokens - 1, head_dim))  # offsets -(T-1) .. T-1
        nn.init.trunc_normal_(self.weight, std=0.02)

    def _check(self, grid: tuple[int, int]) -> None:
        if tuple(grid) != self.grid:
            raise ValueError(
                f"pos_embed 'relative' (1-D relative attention) learned offsets for a {self.grid[0]}x{self.grid[1]} "
                f"patch grid; a {grid[0]}x{grid[1]} grid gives its raster offsets other meanings, so it is refused"
            )

    def resize_grid(self, grid: tuple[int, int]) -> None:
        self._check(grid)

    def forward(self, grid: tuple[int, int]) -> torch.Tensor:
        """The offset embeddings (2T - 1, head_dim), row T - 1 + (p_q - p_k) for offset p_q - p_k."""
        self._check(grid)
        return self.weight
