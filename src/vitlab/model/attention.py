"""Multi-head self-attention (paper Appendix A, Eq. 5-8) with a fused qkv projection.

Two paths compute the same thing, as nanoGPT's `if self.flash:` does: PyTorch's fused
scaled_dot_product_attention, and the softmax written out, which also returns the attention weights
for analysis. vitlab.accel swaps in a subclass whose `attend` may take a faster CPU path.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def softmax_in_fp32(logits: torch.Tensor) -> torch.Tensor:
    """softmax over the keys in at least fp32, rounded to the logits' dtype: in bf16 the small
    weights would round away."""
    return logits.softmax(dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32)).to(logits.dtype)


def softmax_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    bias: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    softmax: Callable[[torch.Tensor], torch.Tensor] = softmax_in_fp32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 5-7 written out: softmax(q k^T * scale + bias) v and the weights (B, heads, Q, T)."""
    logits = (q * scale) @ k.transpose(-2, -1)  # (B, heads, Q, T)
    if bias is not None:
        logits = logits + bias
    weights = softmax(logits)
    return F.dropout(weights, dropout_p, training=dropout_p > 0) @ v, weights


def relative_attention_logits(q: torch.Tensor, offsets: torch.Tensor, scale: float, num_keys: int) -> torch.Tensor:
    """q (B, heads, Q, hd) against offset embeddings (2T - 1, hd) -> (B, heads, Q, T) logits for each
    query i and key j, read at offset i - j (Appendix D.4)."""
    per_offset = (q * scale) @ offsets.to(q.dtype).t()  # (B, heads, Q, 2T - 1)
    queries = torch.arange(q.shape[2], device=q.device)
    keys = torch.arange(num_keys, device=q.device)
    index = queries[:, None] - keys[None, :] + (offsets.shape[0] - 1) // 2  # (Q, T), in [0, 2T - 2]
    return per_offset.gather(-1, index.expand(*per_offset.shape[:2], -1, -1))


class Attention(nn.Module):
    def __init__(
        self,
        dim: int,
        num_heads: int,
        head_dim: int | None = None,
        qkv_bias: bool = True,
        attn_dropout: float = 0.0,
        proj_dropout: float = 0.0,
        qk_norm: bool = False,
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim or dim // num_heads
        inner = self.num_heads * self.head_dim
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * inner, bias=qkv_bias)  # U_qkv of Eq. 5, all heads at once
        # qk-norm (ViT-22B, timm's qk_norm): each head's queries and keys normalised before the logits
        self.q_norm = nn.LayerNorm(self.head_dim, eps=norm_eps) if qk_norm else nn.Identity()
        self.k_norm = nn.LayerNorm(self.head_dim, eps=norm_eps) if qk_norm else nn.Identity()
        self.attn_dropout = attn_dropout
        self.proj = nn.Linear(inner, dim)  # U_msa of Eq. 8
        self.proj_drop = nn.Dropout(proj_dropout)

    def forward(
        self,
        x: torch.Tensor,
        bias: torch.Tensor | None = None,
        need_weights: bool = False,
        num_queries: int | None = None,
        relative: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, D), bias (heads, T, T) or None -> (B, Q, D) and, if asked, weights (B, heads, Q, T).

        Q = T, or the first `num_queries` tokens when only their outputs are wanted (all T are keys).
        relative: offset embeddings (2T - 1, head_dim) of the paper's relative attention (Appendix
        D.4), whose query-dependent logits join the bias; both paths see the same logits.
        """
        batch, tokens, _ = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, heads, T, head_dim)
        q, k = self.q_norm(q), self.k_norm(k)
        if num_queries is not None:
            q = q[:, :, :num_queries]  # (B, heads, Q, head_dim)
            bias = bias[:, :num_queries] if bias is not None else None
        if relative is not None:
            logits = relative_attention_logits(q, relative, self.scale, tokens)  # (B, heads, Q, T)
            bias = logits if bias is None else bias.to(q.dtype) + logits
        dropout_p = self.attn_dropout if self.training else 0.0
        if bias is not None:
            bias = bias.to(q.dtype)
        weights = None
        if need_weights:
            out, weights = self.attend_with_weights(q, k, v, bias, dropout_p)
        else:
            out = self.attend(q, k, v, bias, dropout_p)
        out = out.transpose(1, 2).reshape(batch, q.shape[2], self.num_heads * self.head_dim)
        return self.proj_drop(self.proj(out)), weights

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, dropout_p: float
    ) -> torch.Tensor:
        """softmax(q k^T / sqrt(head_dim) + bias) v, (B, heads, Q, head_dim), by the fused kernel."""
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p)

    def attend_with_weights(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, dropout_p: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`attend`'s output and the weights (B, heads, Q, T), the softmax written out."""
        return softmax_attention(q, k, v, self.scale, bias, dropout_p)
