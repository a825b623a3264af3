"""The ViT itself: every registered variant, every option, and the errors users get."""

from __future__ import annotations

import pytest
import torch

from helpers import randomise_
from vitlab.model import ConfigError, ViTConfig, config_for, create_untrained, list_models

HEAVY = {"L", "H"}


def small_image_size(name: str) -> int:
    """Two patches a side: enough to exercise the grid, cheap even for H."""
    return 2 * int(name.split("/")[1])


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            n,
            marks=[pytest.mark.slow, pytest.mark.timeout(600)] if n.split("/")[0] in HEAVY else pytest.mark.integration,
        )
        for n in list_models(family="vit")
    ],
)
def test_every_registered_variant(name):
    size = small_image_size(name)
    model = create_untrained(name, image_size=size, num_classes=7)
    randomise_(model.head, std=0.02)
    images = torch.randn(2, 3, size, size)
    logits = model(images)
    assert logits.shape == (2, 7)
    logits.square().mean().backward()
    assert model.patch_embed.proj.weight.grad is not None
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    model.eval()
    with torch.no_grad():
        fused = model(images)
        explicit, attentions = model.forward_with_attention(images)
    torch.testing.assert_close(fused, explicit, rtol=1e-5, atol=1e-5)
    tokens = (size // model.config.patch_size) ** 2 + 1
    assert len(attentions) == model.config.depth
    assert attentions[0].shape == (2, model.config.num_heads, tokens, tokens)


@pytest.mark.unit
def test_paper_table_1_sizes():
    counts = {}
    for name in ("B/16", "L/16", "H/14"):
        with torch.device("meta"):
            model = create_untrained(name)
        counts[name] = sum(p.numel() for p in model.parameters()) / 1e6
    # Table 1: 86M, 307M, 632M (head and image size move the last digit).
    assert counts["B/16"] == pytest.approx(86, abs=1.5)
    assert counts["L/16"] == pytest.approx(305, abs=3)
    assert counts["H/14"] == pytest.approx(632, abs=2)
    assert config_for("H/14").attn_head_dim == 80
    assert config_for("B/16").attn_head_dim == 64


OPTIONS = [
    dict(pool="token", pos_embed="learned"),
    dict(pool="gap", pos_embed="learned"),
    dict(pool="gap", pos_embed="learned", gap_norm="before_pool"),
    dict(pool="token", pos_embed="none"),
    dict(pool="token", pos_embed="2d"),
    dict(pool="gap", pos_embed="sincos"),
    dict(pool="token", pos_embed="relative"),
    dict(pool="gap", pos_embed="relative"),
    dict(pool="token", pos_embed="relative_bias"),
    dict(pool="gap", pos_embed="relative_bias"),
    dict(pool="token", pos_embed="learned", pos_embed_at="every_layer"),
    dict(pool="gap", pos_embed="learned", pos_embed_at="every_layer_shared"),
    dict(pool="token", pos_embed="2d", pos_embed_at="every_layer"),
    dict(pool="token", pos_embed="2d", pos_embed_at="every_layer_shared"),
    dict(pool="token", representation_size=24),
    dict(pool="flatten", head_hidden=(32, 16), head_dropout=0.5),
    dict(pool="token", act="gelu_tanh", norm_eps=1e-12, qkv_bias=False),
    dict(pool="token", head_dim=24),
]


def tiny(**overrides) -> ViTConfig:
    fields = dict(image_size=16, patch_size=4, dim=32, depth=2, num_heads=4, mlp_dim=64, num_classes=5)
    fields.update(overrides)
    return ViTConfig(**fields)


@pytest.mark.unit
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_options_forward_backward_and_attention_paths_agree(options):
    model = randomise_(create_untrained(tiny(**options)))
    images = torch.randn(3, 3, 16, 16)
    model.train()
    model(images).sum().backward()
    model.eval()
    with torch.no_grad():
        fused = model(images)
        explicit, attentions = model.forward_with_attention(images)
    torch.testing.assert_close(fused, explicit, rtol=1e-5, atol=1e-5)
    for weights in attentions:
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


@pytest.mark.unit
@pytest.mark.parametrize(
    "pos_embed", ["learned", "2d", "sincos", "relative_bias", "none", "learned:every_layer", "2d:every_layer_shared"]
)
@pytest.mark.parametrize("pool", ["token", "gap"])
def test_runtime_resolution_change_equals_resized_model(pos_embed, pool):
    """Running at a new (non-square) size resamples E_pos exactly as set_image_size does."""
    kind, _, where = pos_embed.partition(":")
    model = randomise_(create_untrained(tiny(pos_embed=kind, pos_embed_at=where or "input", pool=pool))).eval()
    images = torch.randn(2, 3, 24, 32)
    with torch.no_grad():
        on_the_fly = model(images)
        model.set_image_size((24, 32))
        resized = model(images)
    assert model.config.image_size == (24, 32)
    torch.testing.assert_close(on_the_fly, resized, rtol=1e-5, atol=1e-5)


@pytest.mark.unit
def test_position_embedding_is_position_specific():
    """Without position information the model is permutation-equivariant over patches; with it, not."""

    def patch_shuffled_logits(pos_embed):
        model = randomise_(create_untrained(tiny(pos_embed=pos_embed, pool="gap"))).eval()
        images = torch.randn(1, 3, 16, 16)
        # Swap two 4x4 patches.
        swapped = images.clone()
        swapped[..., 0:4, 0:4], swapped[..., 12:16, 12:16] = images[..., 12:16, 12:16], images[..., 0:4, 0:4]
        with torch.no_grad():
            return model(images), model(swapped)

    same, swapped = patch_shuffled_logits("none")
    torch.testing.assert_close(same, swapped, rtol=1e-5, atol=1e-5)
    for kind in ("learned", "2d", "sincos", "relative", "relative_bias"):
        a, b = patch_shuffled_logits(kind)
        assert not torch.allclose(a, b, rtol=0, atol=1e-5), kind  # above the bar "none" is held to


@pytest.mark.unit
def test_relative_is_appendix_d4_relative_attention():
    """Each query attends to learned per-offset embeddings; those logits q_i . r_(i-j) / sqrt(d) join
    the content logits (Appendix D.4), so the position term depends on the query's content."""
    model = randomise_(create_untrained(tiny(pos_embed="relative", depth=1))).eval()
    attn, offsets = model.blocks[0].attn, model.relative_attention[0].weight  # (2T - 1, head_dim)
    tokens = 1 + 16
    assert offsets.shape == (2 * tokens - 1, 8)
    x = torch.randn(2, tokens, 32)
    with torch.no_grad():
        _, weights = attn(x, need_weights=True, relative=offsets)
        q, k, _ = attn.qkv(x).reshape(2, tokens, 3, 4, 8).permute(2, 0, 3, 1, 4)
        position = torch.empty(2, 4, tokens, tokens)
        for i in range(tokens):
            for j in range(tokens):
                position[:, :, i, j] = q[:, :, i] @ offsets[i - j + tokens - 1] / 8**0.5
        expected = (q @ k.transpose(-2, -1) / 8**0.5 + position).softmax(-1)
    torch.testing.assert_close(weights, expected, rtol=1e-5, atol=1e-6)
    assert position.std() > 1e-2
    assert not torch.allclose(position[0], position[1], atol=1e-3)  # content-dependent, unlike a bias table


@pytest.mark.unit
def test_relative_attention_refuses_another_grid():
    model = create_untrained(tiny(pos_embed="relative"))
    with pytest.raises(ValueError, match="relative.*4x4 patch grid; a 6x8 grid"):
        model(torch.randn(1, 3, 24, 32))
    with pytest.raises(ValueError, match="relative.*4x4 patch grid"):
        model.set_image_size((24, 32))


def manual_forward(model, tables) -> torch.Tensor:
    """Eq. 1-4 with tables[l] added to the tokens before layer l (Table 8's "every layer" columns)."""
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    tokens, _ = model.patch_embed(images)
    z = torch.cat([model.cls_token.expand(2, -1, -1), tokens], dim=1)
    for block, table in zip(model.blocks, tables):
        z, _ = block(z + table)
    return model.head(model.norm(z)[:, 0])


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["learned", "2d"])
def test_pos_embed_at_every_layer_and_every_layer_shared(kind):
    """every_layer: layer l gets its own E_pos before it; every_layer_shared: one E_pos before every
    layer; input: E_pos only before the first (Table 8's three columns)."""
    grid = (4, 4)
    per_layer = randomise_(create_untrained(tiny(pos_embed=kind, pos_embed_at="every_layer", depth=3))).eval()
    shared = randomise_(create_untrained(tiny(pos_embed=kind, pos_embed_at="every_layer_shared", depth=3))).eval()
    stem = create_untrained(tiny(pos_embed=kind, depth=3)).eval()
    stem.load_state_dict(shared.state_dict())
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        tables = [layer(grid) for layer in per_layer.layer_pos_embed]
        assert len(tables) == 3 and not torch.allclose(tables[0], tables[1])
        torch.testing.assert_close(per_layer(images), manual_forward(per_layer, tables), rtol=1e-5, atol=1e-5)
        table = shared.pos_embed(grid)
        torch.testing.assert_close(shared(images), manual_forward(shared, [table] * 3), rtol=1e-5, atol=1e-5)
        zero = torch.zeros_like(table)
        torch.testing.assert_close(stem(images), manual_forward(stem, [table, zero, zero]), rtol=1e-5, atol=1e-5)
        assert not torch.allclose(stem(images), shared(images), atol=1e-4)
    assert sum(p.numel() for n, p in per_layer.named_parameters() if n.startswith("layer_pos_embed")) == (
        3 * sum(p.numel() for n, p in shared.named_parameters() if n.startswith("pos_embed"))
    )


@pytest.mark.unit
@pytest.mark.fault("bad-config", kinds=4)
def test_pos_embed_at_refuses_what_table_8_does_not_define():
    for kind in ("none", "relative", "sincos"):
        with pytest.raises(ConfigError, match=f"pos_embed_at 'every_layer'.*got pos_embed '{kind}'"):
            tiny(pos_embed=kind, pos_embed_at="every_layer")
    with pytest.raises(ConfigError, match="unknown pos_embed_at 'stem'"):
        tiny(pos_embed_at="stem")


@pytest.mark.unit
def test_reset_classifier_drops_pre_logits_and_zero_inits_head():
    model = randomise_(create_untrained(tiny(representation_size=24)))
    assert isinstance(model.pre_logits, torch.nn.Sequential)
    model.reset_classifier(3, class_names=["a", "b", "c"])
    assert isinstance(model.pre_logits, torch.nn.Identity)
    assert model.head.weight.shape == (3, 32)
    assert model.head.weight.abs().sum() == 0 and model.head.bias.abs().sum() == 0
    assert model.config.representation_size is None and model.config.class_names == ["a", "b", "c"]
    assert torch.equal(model(torch.randn(2, 3, 16, 16)), torch.zeros(2, 3))
    model.reset_classifier(0)
    images = torch.randn(2, 3, 16, 16)
    features = model(images)  # features only: the pooled class token
    assert features.shape == (2, 32) and (features[0] - features[1]).abs().max() > 1e-3
    torch.testing.assert_close(features, model.forward_head(model.forward_features(images), pre_logits=True))


@pytest.mark.unit
def test_forward_head_pre_logits_is_the_representation():
    model = randomise_(create_untrained(tiny(representation_size=24))).eval()
    tokens = model.forward_features(torch.randn(2, 3, 16, 16))
    features = model.forward_head(tokens, pre_logits=True)
    assert features.shape == (2, 24)
    assert features.abs().max() <= 1  # tanh
    torch.testing.assert_close(model.head(features), model.forward_head(tokens))


@pytest.mark.unit
def test_eval_mode_is_deterministic_with_all_dropouts():
    model = randomise_(create_untrained(tiny(dropout=0.3, attn_dropout=0.3, drop_path=0.3))).eval()
    images = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(model(images), model(images))
    model.train()
    assert not torch.allclose(model(images), model(images))


@pytest.mark.unit
def test_gradient_checkpointing_gives_same_gradients():
    images = torch.randn(2, 3, 16, 16)
    grads = []
    for enabled in (False, True):
        model = randomise_(create_untrained(tiny()))
        model.set_grad_checkpointing(enabled)
        model(images).square().sum().backward()
        grads.append(model.patch_embed.proj.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.unit
def test_no_weight_decay_names():
    names = create_untrained(tiny()).no_weight_decay()
    assert "cls_token" in names and "pos_embed.weight" in names
    assert "blocks.0.norm1.weight" in names and "blocks.0.attn.qkv.bias" in names
    assert "blocks.0.attn.qkv.weight" not in names


@pytest.mark.unit
def test_config_round_trip():
    config = tiny(pool="gap", image_size=(16, 24), head_hidden=(8,), class_names=["x"] * 5)
    again = ViTConfig.from_dict(config.to_dict())
    assert again == config


@pytest.mark.unit
@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: create_untrained("B/15", image_size=224), "not divisible by patch size 15"),
        (lambda: create_untrained("Q/16"), "unknown model size 'Q'"),
        (lambda: create_untrained("B16"), "not of the form SIZE/PATCH"),
        (lambda: create_untrained("B/16", num_heads=7), "not divisible by 7 heads"),
        (lambda: create_untrained("B/16", pool="mean"), "unknown pool 'mean'"),
        (lambda: create_untrained("B/16", pos_embed="3d"), "unknown pos_embed '3d'"),
        (lambda: create_untrained("B/16", dropout=1.5), "dropout must be in [0, 1)"),
        (lambda: create_untrained("B/16", colour=True), "colour"),
        (lambda: ViTConfig.from_dict({"dim": 8, "widht": 3}), "unknown ViT config keys: widht"),
    ],
)
def test_bad_configs_name_the_problem(build, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        build()


@pytest.mark.unit
@pytest.mark.parametrize(
    "shape, message",
    [
        ((2, 3, 18, 16), "18x16 is not divisible by patch size 4"),
        ((2, 1, 16, 16), "expected 3 channels, got 1"),
        ((3, 16, 16), "expected images of shape"),
    ],
)
def test_bad_inputs_name_the_problem(shape, message):
    model = create_untrained(tiny())
    with pytest.raises(ValueError, match=message):
        model(torch.randn(shape))
