"""Register tokens (Darcet et al. 2023) apart: rollout and attention distance read the patches only,
so how much attention the patches give the registers is reported on its own."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from vitlab.model import VisionTransformer

from .result import AnalysisResult, rounded
from .rollout import attention_maps

log = logging.getLogger("vitlab")


def register_attention_share(attentions: Sequence[torch.Tensor], class_token: bool, registers: int) -> torch.Tensor:
    """Per-layer attention (B, heads, T, T) -> (B, layers): the mean share of a patch query's attention
    that goes to the register tokens (the columns after the class token), over heads and patches."""
    first = int(class_token)
    prefix = first + registers
    shares = [weights[:, :, prefix:, first:prefix].sum(dim=-1).mean(dim=(1, 2)) for weights in attentions]
    return torch.stack(shares, dim=1).float()


def add_register_numbers(model: VisionTransformer, images: torch.Tensor, result: AnalysisResult) -> None:
    """analysis.json's "register_attention_share": per layer, the mean over `images` of that share."""
    config = model.config
    device = next(model.parameters()).device
    maps = attention_maps(model, images.to(device))
    share = register_attention_share(maps.attentions, config.has_class_token, config.register_tokens).mean(dim=0)
    result.numbers["register_attention_share"] = rounded(share.cpu())
    log.info(
        "%d register tokens: the patches give them %.1f%% of their attention in the last layer "
        "(rollout and attention distance read the patches only)",
        config.register_tokens,
        100 * float(share[-1]),
    )
