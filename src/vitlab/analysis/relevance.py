"""Class-specific relevance: the gradient-weighted attention rule of Chefer, Gur & Wolf (ICCV 2021,
"Generic Attention-model Explainability for Interpreting Bi-Modal and Encoder-Decoder
Transformers", Eq. 5-6 for self-attention).

Start from R = I (each token is relevant to itself) and, first layer to last, add what the
layer mixes in: A_bar = E_h[(grad A * A)^+], R = R + A_bar R, where grad A is the gradient of the
chosen class's logit with respect to that layer's attention weights. Unlike rollout the map
depends on the class: a weight counts only as far as raising it raises that class's score.

The weights `model.forward_with_attention` returns are the very tensors the encoder multiplies
with its values, so they sit in the autograd graph; their gradient is taken with
torch.autograd.grad from the logits of the same pass. An Axial-ViT's row and column weights are
expanded to (T, T) matrices, the gradients alike, and the rule runs over the 2 x depth sub-blocks
(analysis/axial.py). Its blocks hand out the weights reshaped per grid line, a view the rest of the
pass never reads, so the gradient is taken with respect to what each attention module returned
(caught by a forward hook, in call order) and reshaped to the handed-out layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from vitlab.model.attention import Attention

from .axial import regroup, token_attention, weight_tensors
from .rollout import output_token_map, require_attention


def relevance_rule(attentions: Sequence[torch.Tensor], gradients: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-layer attention and its gradient, each (B, heads, T, T), first layer first -> R (B, T, T)."""
    if not attentions or len(attentions) != len(gradients):
        raise ValueError(f"the rule needs one gradient per attention layer, got {len(attentions)} and {len(gradients)}")
    first = attentions[0]
    relevance = torch.eye(first.shape[-1], device=first.device).expand(first.shape[0], -1, -1)
    for weights, grad in zip(attentions, gradients):
        if weights.shape != grad.shape:
            raise ValueError(f"attention {tuple(weights.shape)} and gradient {tuple(grad.shape)} differ in shape")
        mixed = (grad.float() * weights.float()).clamp_min(0).mean(dim=1)  # Eq. 5: E_h[(grad A * A)^+]
        relevance = relevance + mixed @ relevance  # Eq. 6
    return relevance


@dataclass
class RelevanceMaps:
    """Class-specific relevance of one forward pass, for a batch of images."""

    logits: torch.Tensor  # (B, K), the prediction of the same pass
    target: torch.Tensor  # (B,) the class each map explains
    relevance: torch.Tensor  # (B, T, T) token-to-token relevance R
    maps: torch.Tensor  # (B, h, w): the row of the token the classifier reads, patch columns


def resolve_targets(logits: torch.Tensor, target: int | Sequence[int] | None) -> torch.Tensor:
    """None: each image's predicted class; an int: that class for all; a list: one per image."""
    batch, classes = logits.shape
    if target is None:
        return logits.argmax(dim=-1)
    chosen = torch.tensor([target] * batch if isinstance(target, int) else list(target), dtype=torch.long)
    if len(chosen) != batch:
        raise ValueError(f"{len(chosen)} target classes for {batch} images")
    bad = [int(k) for k in chosen if not 0 <= int(k) < classes]
    if bad:
        raise ValueError(f"class {bad[0]} is out of range for a model with {classes} classes")
    return chosen.to(logits.device)


def class_relevance(model: nn.Module, images: torch.Tensor, target: int | Sequence[int] | None = None) -> RelevanceMaps:
    """Run `images` (B, C, H, W), normalised, once with gradients; the relevance map of `target`.

    Call `model.eval()` first: in training mode dropout (and a hybrid's batch statistics) would
    change the pass. The model's parameters receive no gradient.
    """
    vit = require_attention(model)
    config = vit.config
    if config.num_classes < 2:
        raise ValueError(
            f"{config.name or type(vit).__name__}: class relevance needs a classifier; "
            f"this model outputs {config.num_classes or 'no'} class scores"
        )
    # The images take part in the graph so that the attention has a gradient even when every
    # parameter is frozen.
    inputs = images.detach().requires_grad_(True)
    used: list[torch.Tensor] = []  # the weights each attention module returned, in call order
    hooks = [
        module.register_forward_hook(lambda _module, _args, output: used.append(output[1]))
        for module in vit.modules()
        if isinstance(module, Attention)
    ]
    try:
        with torch.enable_grad():
            logits, weights = vit.forward_with_attention(inputs)
            chosen = resolve_targets(logits.detach(), target)
            # Images are independent, so one backward of the summed scores gives each its own gradient.
            score = logits.gather(1, chosen[:, None]).sum()
            tensors = weight_tensors(weights)
            if [t.numel() for t in used] != [t.numel() for t in tensors]:
                raise ValueError(f"{config.name}: its attention modules returned weights other than it hands out")
            gradients = [grad.reshape(t.shape) for grad, t in zip(torch.autograd.grad(score, used), tensors)]
    finally:
        for hook in hooks:
            hook.remove()
    attentions = token_attention(regroup(weights, [tensor.detach() for tensor in tensors]))
    relevance = relevance_rule(attentions, token_attention(regroup(weights, gradients)))
    grid = config.grid_for(images.shape)
    return RelevanceMaps(
        logits=logits.detach(),
        target=chosen,
        relevance=relevance,
        maps=output_token_map(relevance, grid, config.num_prefix_tokens, config.has_class_token),
    )
