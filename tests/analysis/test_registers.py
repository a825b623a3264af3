"""A model with register tokens (DINOv2-reg's shape: class token, 4 registers, layer scale): rollout and
attention distance read the patches only, and the registers' share of attention is reported apart."""

from __future__ import annotations

import json

import pytest
import torch

from helpers import randomise_
from vitlab.analysis import (
    analyze,
    attention_distance,
    attention_maps,
    attention_rollout,
    output_token_map,
    register_attention_share,
)
from vitlab.model import create_untrained

REGISTERS = 4
GRID = (4, 4)


def tiny(pool: str):
    model = create_untrained(
        "Ti/4", image_size=16, depth=2, dim=32, num_heads=2, mlp_dim=64, num_classes=5, pool=pool,
        class_token=pool == "token", register_tokens=REGISTERS, init_values=0.5,
    )  # fmt: skip
    return randomise_(model).eval()


def images(count: int = 2) -> torch.Tensor:
    return torch.randn(count, 3, 16, 16, generator=torch.Generator().manual_seed(3))


@pytest.mark.unit
@pytest.mark.parametrize("pool", ["token", "gap"])
def test_rollout_reads_the_patches_and_the_class_token_only(pool):
    model = tiny(pool)
    maps = attention_maps(model, images())
    prefix = model.config.num_prefix_tokens
    rollout = attention_rollout(maps.attentions)
    rows = rollout[:, 0] if pool == "token" else rollout[:, prefix:].mean(dim=1)  # never a register's row
    torch.testing.assert_close(maps.rollout, rows[:, prefix:].reshape(-1, *GRID))
    plain = output_token_map(rollout, GRID, prefix, class_token=pool == "token")
    torch.testing.assert_close(plain, maps.rollout)


@pytest.mark.unit
def test_distance_reads_patch_to_patch_weights_only():
    maps = attention_maps(tiny("token"), images())
    moved = [weights.clone() for weights in maps.attentions]
    for weights in moved:
        weights[:, :, :, 1 : 1 + REGISTERS] *= 7.0  # attention to the registers changes no distance
    distance = attention_distance(maps.attentions, GRID, 4, 1 + REGISTERS)
    torch.testing.assert_close(attention_distance(moved, GRID, 4, 1 + REGISTERS), distance)


@pytest.mark.unit
def test_register_share_is_the_patches_attention_to_the_registers():
    maps = attention_maps(tiny("token"), images())
    share = register_attention_share(maps.attentions, True, REGISTERS)
    last = maps.attentions[-1]
    torch.testing.assert_close(share[:, -1], last[:, :, 5:, 1:5].sum(dim=-1).mean(dim=(1, 2)))
    assert share.shape == (2, 2) and bool(((share > 0) & (share < 1)).all())


@pytest.mark.integration
def test_analyze_reports_the_register_share(tmp_path):
    model = tiny("gap")
    result = analyze(model, images(4), tmp_path, what="rollout,distance", show=2)
    numbers = json.loads(result.json_path.read_text())
    expected = register_attention_share(attention_maps(model, images(4)).attentions, False, REGISTERS).mean(dim=0)
    assert numbers["register_attention_share"] == pytest.approx(expected.tolist(), abs=1e-5)
