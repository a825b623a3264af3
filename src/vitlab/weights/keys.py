"""Renaming another library's state-dict keys to vitlab's, and reading sizes off the tensors."""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

from vitlab.errors import CheckpointError

# (regular expression, replacement) applied to each key in turn; the first that matches wins.
Rules = list[tuple[str, str]]


def rename_keys(state: Mapping[str, torch.Tensor], rules: Rules) -> dict[str, torch.Tensor]:
    """Keys no rule matches are kept as they are, so a strict load names them as unexpected."""
    compiled = [(re.compile(pattern), replacement) for pattern, replacement in rules]
    renamed: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        for pattern, replacement in compiled:
            new_key, count = pattern.subn(replacement, key)
            if count:
                key = new_key
                break
        renamed[key] = value
    return renamed


def count_blocks(state: Mapping[str, object], pattern: str, source: str) -> int:
    """Number of encoder blocks, from keys such as `blocks.(\\d+).`; they must run 0..L-1."""
    found = {int(m.group(1)) for key in state if (m := re.match(pattern, key))}
    if not found:
        raise CheckpointError(f"{source}: no encoder blocks (no key matches {pattern!r})")
    if found != set(range(len(found))):
        raise CheckpointError(f"{source}: encoder blocks {sorted(found)} are not numbered 0..{len(found) - 1}")
    return len(found)


def require(state: Mapping[str, torch.Tensor], key: str, source: str) -> torch.Tensor:
    if key not in state:
        raise CheckpointError(f"{source}: missing key {key}")
    return state[key]


def patch_conv_sizes(weight: torch.Tensor, source: str) -> tuple[int, int, int]:
    """(D, C, P, P) patch-embedding conv -> (dim, in_channels, patch_size)."""
    dim, channels, height, width = weight.shape
    if height != width:
        raise CheckpointError(f"{source}: non-square patches {height}x{width} are not supported")
    return dim, channels, height
