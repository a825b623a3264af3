"""Where the model looks: Attention Rollout (paper Fig. 6, Appendix D.8) and raw attention maps.

Attention Rollout (Abnar & Zuidema, 2020): average each layer's attention over heads, add the
identity for the residual connection and renormalise the rows, then multiply the matrices of all
layers, so that entry (i, j) says how much output token i draws on input token j. The map shown
for an image is the row of the token the classifier reads: the class token, or for a GAP model the
mean over the patch queries, since the classifier reads their mean.

Two options of the widely used vit-explain implementation (Gildenblat) are keywords of
`attention_rollout`: head fusion by the max or min over heads instead of the mean, and a discard
ratio that zeroes the lowest weights before the residual is added. vit-explain ranks the weights
over the whole T x T matrix of an image; here each row (query) drops its own lowest fraction, so
every token keeps its strongest links. As there, the class token's attention to itself is never
dropped.

All attention comes from `model.forward_with_attention`, the pass that also gives the logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vitlab.model import VisionTransformer

from .axial import token_attention

HEAD_FUSIONS = ("mean", "max", "min")


def layer_attention(
    weights: torch.Tensor,
    add_residual: bool = True,
    *,
    head_fusion: str = "mean",
    discard_ratio: float = 0.0,
    protected_token: int | None = 0,
) -> torch.Tensor:
    """One layer's attention (B, heads, T, T) -> the (B, T, T) token mixing that rollout multiplies.

    Heads fused by `head_fusion`; then, per row, the lowest `discard_ratio` of the weights set to
    zero, except (protected_token, protected_token), the class token's attention to itself (None:
    a GAP model, nothing protected); then the identity added and the rows renormalised.
    """
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(f"head fusion {head_fusion!r} is not one of {', '.join(HEAD_FUSIONS)}")
    if not 0.0 <= discard_ratio < 1.0:
        raise ValueError(f"discard ratio {discard_ratio} is outside [0, 1)")
    weights = weights.float()
    if head_fusion == "mean":
        layer = weights.mean(dim=1)  # (B, T, T)
    elif head_fusion == "max":
        layer = weights.amax(dim=1)
    else:
        layer = weights.amin(dim=1)
    tokens = layer.shape[-1]
    dropped = int(tokens * discard_ratio)  # per row, rounded down as vit-explain does
    if dropped:
        lowest = layer.topk(dropped, dim=-1, largest=False).indices  # (B, T, dropped)
        drop = torch.zeros_like(layer, dtype=torch.bool).scatter_(-1, lowest, True)
        if protected_token is not None:
            drop[:, protected_token, protected_token] = False
        layer = layer.masked_fill(drop, 0.0)
    if add_residual:
        # z_l = z_{l-1} + MSA(z_{l-1}): half of each token comes straight through the skip.
        layer = layer + torch.eye(tokens, device=layer.device)
        layer = layer / layer.sum(dim=-1, keepdim=True)
    return layer


def attention_rollout(
    attentions: Sequence[torch.Tensor],
    add_residual: bool = True,
    *,
    head_fusion: str = "mean",
    discard_ratio: float = 0.0,
    protected_token: int | None = 0,
) -> torch.Tensor:
    """Per-layer attention (B, heads, T, T) -> rolled-out attention (B, T, T), first layer to last.

    head_fusion ("mean", "max" or "min"), discard_ratio and protected_token: see `layer_attention`;
    the defaults are the paper's rollout (mean over heads, nothing dropped).
    """
    if not attentions:
        raise ValueError("attention rollout needs the attention of at least one layer, got none")
    rollout: torch.Tensor | None = None
    for weights in attentions:
        layer = layer_attention(
            weights,
            add_residual,
            head_fusion=head_fusion,
            discard_ratio=discard_ratio,
            protected_token=protected_token,
        )
        rollout = layer if rollout is None else layer @ rollout  # token mixing of layer l after l-1
    assert rollout is not None  # at least one layer, checked above
    return rollout


def output_token_map(
    matrix: torch.Tensor, grid: tuple[int, int], num_prefix_tokens: int, class_token: bool = True
) -> torch.Tensor:
    """(B, T, T) token-to-token weights -> (B, h, w): what the classifier's input attends to.

    With a class token that is its row; a GAP model has none, so the rows of the patches it
    averages are averaged (not the register tokens', which GAP skips). Only the patch columns are
    kept (the class token and the registers have no place in the image).
    """
    if matrix.shape[-1] != num_prefix_tokens + grid[0] * grid[1]:
        raise ValueError(
            f"{matrix.shape[-1]} tokens do not match a {grid[0]}x{grid[1]} grid plus {num_prefix_tokens} prefix"
        )
    has_class = class_token and num_prefix_tokens > 0
    rows = matrix[:, 0] if has_class else matrix[:, num_prefix_tokens:].mean(dim=1)  # (B, T)
    return rows[:, num_prefix_tokens:].reshape(-1, *grid)


def upsample_map(maps: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """(B, h, w) patch-grid maps -> (B, H, W), bicubic, each scaled to [0, 1] with its maximum at 1."""
    # Bicubic: bilinear turns each patch's peak into a visible pyramid on coarse grids.
    maps = F.interpolate(maps[:, None].float(), size=size, mode="bicubic", align_corners=False)[:, 0]
    peak = maps.flatten(1).amax(dim=1).clamp_min(1e-12)
    return (maps / peak[:, None, None]).clamp(0.0, 1.0)


@dataclass
class AttentionMaps:
    """Everything one forward pass tells about where the model looked, for a batch of images."""

    logits: torch.Tensor  # (B, K), the prediction of the same pass
    attentions: list[torch.Tensor]  # per layer (B, heads, T, T); an Axial-ViT: two per layer, row then column
    rollout: torch.Tensor  # (B, h, w) Attention Rollout of the classifier's token
    raw: torch.Tensor  # (B, h, w) attention of the classifier's token in one layer (and head)
    layer: int  # 0-based layer of `raw`
    head: int | None  # head of `raw`; None is the mean over heads


def resolve_layer_head(depth: int, num_heads: int, layer: int, head: int | None) -> tuple[int, int | None]:
    """Python-style indices (-1 is the last layer) checked against the model; returns 0-based."""
    if not -depth <= layer < depth:
        raise ValueError(f"layer {layer} is out of range for a model with {depth} layers")
    if head is not None and not -num_heads <= head < num_heads:
        raise ValueError(f"head {head} is out of range for a model with {num_heads} heads")
    return layer % depth, (head % num_heads if head is not None else None)


def require_attention(model: nn.Module) -> VisionTransformer:
    """Refuse, in one line, a model that has no attention to analyse (a BiT ResNet); return the transformer."""
    if not isinstance(model, VisionTransformer):  # the one model with forward_with_attention
        name = getattr(model.config, "name", None) or type(model).__name__
        raise ValueError(f"{name}: attention analyses need a transformer; a ResNet has no attention to show")
    return model


@torch.no_grad()
def attention_maps(model: nn.Module, images: torch.Tensor, layer: int = -1, head: int | None = None) -> AttentionMaps:
    """Run `images` (B, C, H, W), already normalised, once and derive rollout and raw maps.

    Any size the model accepts works: the patch grid is read off the input, not the config.
    Call `model.eval()` first unless you want dropout in the attention.
    """
    transformer = require_attention(model)
    config = transformer.config
    logits, weights = transformer.forward_with_attention(images)
    attentions = token_attention(weights)  # an Axial-ViT's rows and columns as (T, T) matrices, two per layer
    grid = config.grid_for(images.shape)  # a hybrid's tokens are backbone stride x P pixels apart
    layer, head = resolve_layer_head(len(attentions), attentions[0].shape[1], layer, head)
    chosen = attentions[layer].float()
    chosen = chosen.mean(dim=1) if head is None else chosen[:, head]
    prefix = config.num_prefix_tokens
    return AttentionMaps(
        logits=logits,
        attentions=attentions,
        rollout=output_token_map(attention_rollout(attentions), grid, prefix, config.has_class_token),
        raw=output_token_map(chosen, grid, prefix, config.has_class_token),
        layer=layer,
        head=head,
    )


def masked_image(image: torch.Tensor, heat: torch.Tensor) -> torch.Tensor:
    """The paper's Fig. 6 rendering: the image (H, W, C) in [0, 1] dimmed by the map (H, W) in [0, 1]."""
    return image * heat[..., None]
