"""From encoder output to logits: pooling (class token, GAP, MAP or flatten), the optional pre-logits
layer of the pre-training head (Sec. 3.1: "an MLP with one hidden layer", tanh), and the linear
classifier that fine-tuning replaces with a zero-initialised one (Sec. 3.2)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def pool_tokens(tokens: torch.Tensor, pool: str, num_prefix_tokens: int) -> torch.Tensor:
    """(B, T, D) -> (B, D) for token / gap / max / avgmax, (B, N*D) for flatten, (B, T, D) for none."""
    if pool == "token":
        return tokens[:, 0]  # y = LN(z_L^0), Eq. 4
    if pool == "none":  # timm's global_pool='': every token, for a dense head or features
        return tokens
    patches = tokens[:, num_prefix_tokens:]
    if pool == "gap":
        return patches.mean(dim=1)
    if pool == "max":
        return patches.amax(dim=1)
    if pool == "avgmax":  # timm's: the mean of the two
        return 0.5 * (patches.amax(dim=1) + patches.mean(dim=1))
    return patches.flatten(1)  # the Keras example: every patch output, flattened


class AttentionPool(nn.Module):
    """Multihead attention pooling (MAP, big_vision's MAPHead, timm's AttentionPoolLatent): one learned
    query attends over the patch tokens, then a residual MLP on the pooled token."""

    def __init__(self, dim: int, num_heads: int, mlp: nn.Module, norm_eps: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.latent = nn.Parameter(nn.init.trunc_normal_(torch.zeros(1, 1, dim), std=dim**-0.5))
        self.q, self.kv, self.proj = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim), nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = mlp

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        batch, count, dim = patches.shape
        query = self.q(self.latent).reshape(1, self.num_heads, 1, -1).expand(batch, -1, -1, -1)
        keys, values = self.kv(patches).reshape(batch, count, 2, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        pooled = self.proj(F.scaled_dot_product_attention(query, keys, values).reshape(batch, dim))
        return pooled + self.mlp(self.norm(pooled))


def build_pre_logits(
    in_features: int, representation_size: int | None, hidden: tuple[int, ...], dropout: float
) -> nn.Module:
    if representation_size:
        return nn.Sequential(nn.Linear(in_features, representation_size), nn.Tanh())
    if hidden:
        layers: list[nn.Module] = [nn.Dropout(dropout)]
        for width in hidden:
            layers += [nn.Linear(in_features, width), nn.GELU(), nn.Dropout(dropout)]
            in_features = width
        return nn.Sequential(*layers)
    return nn.Identity()
