"""Axial-ViT (Appendix D.6): its registered small variants run forward and backward, the attention
weights of forward_with_attention are the ones an explicit row-by-row / column-by-column computation
gives, and the parameter and FLOP counts are those of the model built."""

from __future__ import annotations

import pytest
import torch

import vitlab
from helpers import randomise_
from vitlab.bench.flops import model_flops
from vitlab.errors import ConfigError
from vitlab.memory.budget import parameter_count
from vitlab.model import AxialConfig, AxialViT, config_for, create_untrained, list_models
from vitlab.model.axial import AxialBlock

SMALL = 20_000_000
SMALL_VARIANTS = [name for name in list_models(family="axial") if parameter_count(config_for(name)) < SMALL]
GRID = (3, 2)  # rows x columns of patches: not square, so rows and columns cannot be confused


def axial(name: str, **overrides) -> AxialConfig:
    config = config_for(name, **overrides)
    assert isinstance(config, AxialConfig)
    return config


def tiny(name: str, **overrides) -> AxialConfig:
    patch = axial(name).patch_size
    return axial(name, image_size=(GRID[0] * patch, GRID[1] * patch), num_classes=3, **overrides)


def random_model(config: AxialConfig) -> AxialViT:
    model = create_untrained(config)
    assert isinstance(model, AxialViT)
    randomise_(model)
    return model


@pytest.mark.unit
def test_registered_names_and_the_class_token_choice():
    assert SMALL_VARIANTS and {"Axial-Ti/16", "Axial-S/16", "Axial-B/16"} <= set(list_models(family="axial"))
    model = vitlab.create_model("Axial-Ti/16", image_size=32)
    assert isinstance(model, AxialViT) and model.cls_token is None and model.config.pool == "gap"
    b16 = axial("Axial-B/16")
    assert (b16.dim, b16.depth, b16.num_heads, b16.patch_size) == (768, 12, 12, 16)  # B/16's size table row


@pytest.mark.unit
@pytest.mark.fault("config", kinds=3)
def test_what_axial_vit_has_no_place_for_is_refused():
    with pytest.raises(ConfigError, match="pools by 'gap'"):
        config_for("Axial-Ti/16", pool="token")
    with pytest.raises(ConfigError, match="pos_embed 'relative'"):
        config_for("Axial-Ti/16", pos_embed="relative")
    with pytest.raises(ConfigError, match="unknown model size"):
        config_for("Axial-X/16")


# The quickest of them an integration test, the others slow (seconds each).
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            name,
            marks=pytest.mark.integration if name == "Axial-Ti/32" else [pytest.mark.slow, pytest.mark.timeout(600)],
        )
        for name in SMALL_VARIANTS
    ],
)
def test_small_variants_forward_and_backward(name):
    config = tiny(name)
    model = random_model(config).train()
    images = torch.randn(2, 3, *config.image_size)
    logits = model(images)
    assert logits.shape == (2, 3) and torch.isfinite(logits).all() and logits.std() > 1e-3
    logits.logsumexp(dim=-1).sum().backward()
    missing = [key for key, param in model.named_parameters() if param.grad is None or not param.grad.abs().sum() > 0]
    assert not missing


def explicit_weights(attn, tokens: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) of one line of tokens (B, S, D), written out: (B, heads, S, S)."""
    q, k, _ = attn.qkv(tokens).chunk(3, dim=-1)
    heads = attn.num_heads
    q, k = (t.reshape(t.shape[0], t.shape[1], heads, -1).transpose(1, 2) for t in (q, k))
    return (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(dim=-1)


@pytest.mark.integration
@torch.no_grad()
def test_attention_weights_are_those_of_the_rows_and_columns_of_the_same_pass():
    config = tiny("Axial-Ti/16", depth=2)
    model = random_model(config).eval()
    images = torch.randn(2, 3, *config.image_size)
    logits, attentions = model.forward_with_attention(images)
    torch.testing.assert_close(logits, model(images))  # the same pass as forward (fused attention there)
    h, w = GRID
    heads = config.num_heads
    assert len(attentions) == config.depth
    # An explicit pass: every grid row through the row sub-block, then every column through the column one.
    z, _ = model.embed(images)
    for block, (row, column) in zip(list(model.blocks), attentions):
        assert isinstance(block, AxialBlock)
        assert row.shape == (2, h, heads, w, w) and column.shape == (2, w, heads, h, h)
        x = z.reshape(2, h, w, -1)
        for i in range(h):
            torch.testing.assert_close(row[:, i], explicit_weights(block.row.attn, block.row.norm1(x[:, i])))
        x = torch.stack([block.row(x[:, i])[0] for i in range(h)], dim=1)
        for j in range(w):
            torch.testing.assert_close(
                column[:, j], explicit_weights(block.column.attn, block.column.norm1(x[:, :, j]))
            )
        x = torch.stack([block.column(x[:, :, j])[0] for j in range(w)], dim=2)
        z = x.reshape(2, h * w, -1)
    torch.testing.assert_close(model.forward_head(model.norm(z)), logits)


@pytest.mark.unit
@pytest.mark.parametrize(
    "overrides", [{}, {"pos_embed": "2d", "qkv_bias": False}, {"head_dim": 16, "pos_embed": "none"}]
)
def test_parameter_count_is_the_models(overrides):
    for name in SMALL_VARIANTS[:1] + ["Axial-B/16"]:
        config = config_for(name, **overrides)
        with torch.device("meta"):
            model = create_untrained(config)
        assert parameter_count(config) == sum(p.numel() for p in model.parameters())


@pytest.mark.integration
def test_flops_are_two_vit_blocks_per_layer_with_attention_along_one_axis():
    """FlopCounterMode's count (bench/flops.py) against the matmuls written out (2 FLOPs a multiply-add)."""
    config = tiny("Axial-Ti/16", depth=2)
    h, w = GRID
    tokens, dim, inner, mlp = h * w, config.dim, config.num_heads * config.attn_head_dim, config.mlp_dim
    dense = 2 * tokens * (dim * 3 * inner + inner * dim + 2 * dim * mlp)  # qkv, projection, MLP
    row = 2 * 2 * h * w * w * inner  # q k^T and weights @ v within each of the h rows
    column = 2 * 2 * w * h * h * inner
    patches = 2 * tokens * 3 * config.patch_size**2 * dim
    expected = patches + config.depth * (2 * dense + row + column) + 2 * dim * config.num_classes
    assert model_flops(config) == expected
    assert model_flops(config_for("Axial-B/16")) > model_flops(config_for("B/16"))  # Fig. 13: more compute
