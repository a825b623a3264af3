"""Axial-ViT (paper Appendix D.6): the ViT with each global self-attention block replaced by a row
block and a column block over the 2-D patch grid.

The paper: "we have modified ViT to process inputs in the 2-dimensional shape, instead of a
1-dimensional sequence of patches, and incorporate Axial Transformer blocks, in which instead of a
self-attention followed by an MLP, we have a row-self-attention plus an MLP followed by a
column-self-attention plus an MLP", and "each Transformer block with global self-attention is
replaced by two Axial Transformer blocks, one with row and one with column self-attention ...
there is an extra MLP per Axial-ViT block". Axial attention itself is Ho et al. 2019 ("Axial
Attention in Multidimensional Transformers") and Wang et al. 2020 (Axial-DeepLab): each attention
mixes tokens along one axis and keeps the other axis independent.

So one AxialBlock is two pre-norm residual sub-blocks, each exactly the ViT's Eq. 2-3 with its
own LayerNorms, attention and MLP:

    rows:    z' = z + MSA_row(LN(z)),    z = z' + MLP(LN(z'))   over (B*h, w, D)
    columns: z' = z + MSA_col(LN(z)),    z = z' + MLP(LN(z'))   over (B*w, h, D)

Where the paper is silent, vitlab chooses:
- No class token: a class token has no row or column to sit in, and the paper's model takes its
  input "in the 2-dimensional shape". Axial-ViT pools by global average pooling (pool="gap", the
  paper's Sec. 3.1 / Appendix D.3 alternative to the class token, which it finds as good with a
  tuned learning rate); any other pool is refused.
- Position embedding: the ViT's, added once to the input (learned 1-D by default; "2d", "sincos"
  and "none" too). The relative kinds and per-layer E_pos are the ViT's global-attention layers'
  and are refused.
- Stochastic depth drops a whole sub-block per image (not per row or column), as in the ViT.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from vitlab.errors import ConfigError

from .block import EncoderBlock
from .config import Pooling, ViTConfig
from .registry import Family, make_config, register_architecture, register_family
from .variants import PAPER_PATCH_SIZES, REGISTERED_SIZES, parse_variant
from .vit import VisionTransformer

PREFIX = "Axial-"
AXIAL_POSITION_EMBEDDINGS = ("learned", "2d", "sincos", "none")


@dataclasses.dataclass
class AxialConfig(ViTConfig):
    """A ViTConfig whose model is Axial-ViT: the same fields, fewer allowed values (see the module)."""

    pool: Pooling = "gap"  # no class token (see the module)

    def validate(self) -> None:
        super().validate()
        name = self.name or "Axial-ViT"
        if self.pool != "gap":
            raise ConfigError(f"{name}: pool {self.pool!r}; Axial-ViT has no class token and pools by 'gap'")
        if self.pos_embed not in AXIAL_POSITION_EMBEDDINGS or self.pos_embed_at != "input":
            raise ConfigError(
                f"{name}: pos_embed {self.pos_embed!r} at {self.pos_embed_at!r}; Axial-ViT adds one E_pos "
                f"to the input, one of {AXIAL_POSITION_EMBEDDINGS}"
            )
        if self.backbone is not None:
            raise ConfigError(f"{name}: Axial-ViT has no ResNet backbone (no hybrid)")


class AxialAttention(NamedTuple):
    """One AxialBlock's attention weights: row (B, h, heads, w, w), i.e. for each grid row the
    weights among its w tokens; column (B, w, heads, h, h), for each grid column among its h tokens."""

    row: torch.Tensor
    column: torch.Tensor


def attend_along_last_axis(
    block: EncoderBlock, x: torch.Tensor, need_weights: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """x (B, L, S, D) -> (B, L, S, D): the ViT block's Eq. 2-3 with attention among the S tokens of
    each of the L lines, i.e. on (B*L, S, D); the MLP is per token. The residual branches are
    dropped per image (x's first axis), as the ViT drops them. Weights (B, L, heads, S, S)."""
    batch, lines, length, dim = x.shape
    attended, weights = block.attn(block.norm1(x.reshape(batch * lines, length, dim)), need_weights=need_weights)
    x = x + block.drop_path(attended.reshape(batch, lines, length, dim))  # Eq. 2
    x = x + block.drop_path(block.mlp(block.norm2(x)))  # Eq. 3
    if weights is not None:
        weights = weights.reshape(batch, lines, *weights.shape[1:])
    return x, weights


class AxialBlock(nn.Module):
    """Row block then column block (Appendix D.6), each a ViT EncoderBlock's parts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self.row = EncoderBlock(*args, **kwargs)
        self.column = EncoderBlock(*args, **kwargs)

    def forward(
        self, z: torch.Tensor, grid: tuple[int, int], need_weights: bool = False
    ) -> tuple[torch.Tensor, AxialAttention | None]:
        """z (B, N, D), row-major over the (h, w) grid -> (B, N, D) and, if asked, the weights."""
        batch, tokens, dim = z.shape
        if tokens != grid[0] * grid[1]:
            raise ValueError(f"{tokens} tokens do not fill a {grid[0]}x{grid[1]} grid")
        x = z.reshape(batch, *grid, dim)  # (B, h, w, D)
        x, row = attend_along_last_axis(self.row, x, need_weights)  # along each row: (B*h, w, D)
        x, column = attend_along_last_axis(self.column, x.transpose(1, 2), need_weights)  # (B*w, h, D)
        z = x.transpose(1, 2).reshape(batch, tokens, dim)
        weights = AxialAttention(row, column) if row is not None and column is not None else None
        return z, weights


class AxialViT(VisionTransformer):
    """The ViT (patch embedding, E_pos, final norm, GAP head, reset_classifier, ...) with AxialBlocks."""

    config: AxialConfig

    block_type = AxialBlock

    def encode(  # type: ignore[override]  # weights per layer: a row and a column tensor
        self, images: torch.Tensor, need_weights: bool = False, prefix_only: bool = False
    ) -> tuple[torch.Tensor, list[AxialAttention]]:
        """Encoder output (B, N, D) after the final norm and, if asked, each layer's AxialAttention.
        prefix_only has no effect: there is no class token, GAP reads every token."""
        z, grid = self.embed(images)
        attentions: list[AxialAttention] = []
        for block in self.blocks:
            if self.grad_checkpointing and self.training and not need_weights:
                z, _ = checkpoint(block, z, grid, False, use_reentrant=False)
            else:
                z, weights = block(z, grid, need_weights)
                if weights is not None:
                    attentions.append(weights)
        return self.norm(z), attentions

    def forward_with_attention(  # type: ignore[override]
        self, images: torch.Tensor
    ) -> tuple[torch.Tensor, list[AxialAttention]]:
        """Logits and, from the same pass, every layer's row and column weights; analysis/axial.py
        expands them to (B, heads, T, T) matrices for rollout and attention distance."""
        tokens, attentions = self.encode(images, need_weights=True)
        return self.forward_head(tokens), attentions

    def forward_intermediates(self, *args: Any, **kwargs: Any) -> Any:
        raise ConfigError("forward_intermediates: not available for Axial-ViT (its blocks need the patch grid)")


def is_axial_name(name: str) -> bool:
    return name.startswith(PREFIX)


def axial_config(name: str, **overrides: Any) -> AxialConfig:
    """ "Axial-B/16" -> the AxialConfig of B/16's size (variants.py's table), any field overridden."""
    size, patch_size = parse_variant(name[len(PREFIX) :])
    fields: dict[str, Any] = dict(
        name=name,
        patch_size=patch_size,
        dim=size.dim,
        depth=size.depth,
        mlp_dim=size.mlp_dim,
        num_heads=size.num_heads,
        pool="gap",
    )
    fields.update(overrides)
    return make_config(AxialConfig, name, fields)


register_architecture(AxialConfig, AxialViT)
register_family(
    Family(
        "axial",
        tuple(f"{PREFIX}{size}/{patch}" for size in REGISTERED_SIZES for patch in PAPER_PATCH_SIZES),
        axial_config,
        claims=is_axial_name,
    )
)
