"""A model's parameters by layer, in timm's order, for layer-wise learning-rate decay and freezing.

The layers come from the model's `group_matcher()` (model/timm_api.py) read as timm's
`group_with_matcher` reads it: the embeddings are layer 0, block i is layer i + 1 (the final norm,
marked to join the group before it, shares the last block's layer), and whatever no pattern matches
(the head) is the last layer, depth + 1.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from itertools import chain

from torch import nn

from vitlab.errors import ConfigError

log = logging.getLogger("vitlab")

JOIN_PREVIOUS = 99999.0  # a suffix that puts a match in the group before it (timm's MATCH_PREV_GROUP)


def _rules(matcher: dict) -> list[tuple[re.Pattern, float, tuple | None]]:
    """(pattern, the group's position in the matcher, suffix) for every pattern, in order."""
    rules = []
    for position, spec in enumerate(matcher.values()):
        if spec is None:
            continue
        for pattern, suffix in spec if isinstance(spec, (list, tuple)) else [(spec, None)]:
            rules.append((re.compile(pattern), float(position), suffix))
    return rules


def _ordinal(name: str, rules: list[tuple[re.Pattern, float, tuple | None]]) -> tuple[float, ...]:
    for pattern, position, suffix in rules:
        match = pattern.match(name)
        if match:
            parts = ((position,), match.groups(), suffix)
            return tuple(float(part) for part in chain.from_iterable(p for p in parts if p))
    return (float("inf"),)  # matched by nothing (the head): after every group


def layer_ids(model: nn.Module, key: str) -> dict[str, int]:
    """Parameter name -> layer number (0: the embeddings ... the head last); `key` names the config
    field that asked, for the error when the model has no group_matcher."""
    if not hasattr(model, "group_matcher"):
        raise ConfigError(f"{key}: {type(model).__name__} has no group_matcher() to order its layers (a ViT has)")
    group_matcher: Callable[..., dict] = getattr(model, "group_matcher")  # noqa: B009 (typed here)
    rules = _rules(group_matcher(coarse=False))
    ordinals = {name: _ordinal(name, rules) for name, _ in model.named_parameters()}
    layer_of: dict[tuple[float, ...], int] = {}
    layer = -1
    for ordinal in sorted(set(ordinals.values())):
        if layer < 0 or ordinal[-1] != JOIN_PREVIOUS:
            layer += 1
        layer_of[ordinal] = layer
    return {name: layer_of[ordinal] for name, ordinal in ordinals.items()}


def freeze_layers(model: nn.Module, trainable_blocks: int | None) -> int:
    """Train only the last `trainable_blocks` blocks (with the final norm) and the head: the rest
    get requires_grad False, so the optimiser leaves them out (optim.py). 0 trains the head alone;
    None changes nothing. Returns the number of parameters that train."""
    total = sum(param.numel() for param in model.parameters())
    if trainable_blocks is None:
        return total
    ids = layer_ids(model, "model.trainable_blocks")
    head = max(ids.values())
    depth = head - 1  # layers 1 .. depth are the blocks
    if trainable_blocks > depth:
        raise ConfigError(f"model.trainable_blocks={trainable_blocks}: the model has {depth} blocks")
    for name, param in model.named_parameters():
        param.requires_grad_(ids[name] >= head - trainable_blocks)
    trained = sum(param.numel() for param in model.parameters() if param.requires_grad)
    log.info(
        "model.trainable_blocks=%d: %d of %d parameters train (the last %d blocks and the head); the rest are frozen",
        trainable_blocks,
        trained,
        total,
        trainable_blocks,
    )
    return trained
