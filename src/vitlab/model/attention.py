"""Multi-head self-attention (paper Appendix A, Eq. 5-8) with a fused qkv projection.

Two paths compute the same thing: PyTorch's fused scaled_dot_product_attention (the default, fast),
and an explicit softmax that also returns the attention weights for analysis.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    def __init__(
        self,
        dim: int,
        num_heads: int,
        head_dim: int | None = None,
        qkv_bias: bool = True,
        attn_dropout: float = 0.0,
        proj_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim or dim // num_heads
        inner = self.num_heads * self.head_dim
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * inner, bias=qkv_bias)  # U_qkv of Eq. 5, all heads at once
        self.attn_dropout = attn_dropout
        self.proj = nn.Linear(inner, dim)  # U_msa of Eq. 8
        self.proj_drop = nn.Dropout(proj_dropout)

    def forward(
        self, x: torch.Tensor, bias: torch.Tensor | None = None, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, D), bias (heads, T, T) or None -> (B, T, D) and, if asked, weights (B, heads, T, T)."""
        batch, tokens, _ = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, heads, T, head_dim)
        dropout_p = self.attn_dropout if self.training else 0.0
        if bias is not None:
            bias = bias.to(q.dtype)
        if need_weights:
            logits = (q * self.scale) @ k.transpose(-2, -1)  # (B, heads, T, T)
            if bias is not None:
                logits = logits + bias
            weights = logits.softmax(dim=-1)
            out = F.dropout(weights, dropout_p, self.training) @ v
        else:
            weights = None
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p)
        out = out.transpose(1, 2).reshape(batch, tokens, self.num_heads * self.head_dim)
        return self.proj_drop(self.proj(out)), weights
