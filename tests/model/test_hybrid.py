"""The ResNet + ViT hybrid: parity with timm, the official npz layout with the architecture
inferred, timm state dicts, the registered hybrids and their configs."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest
import torch
from timm.layers import HybridEmbed, StdConv2dSame
from timm.models.resnetv2 import ResNetV2
from timm.models.vision_transformer import VisionTransformer as TimmViT

from helpers import TOLERANCE, images, randomise_, save_state_dict
from vitlab.model import ConfigError, ResNetConfig, ViTConfig, config_for, create_untrained, list_models
from vitlab.weights import load
from vitlab.weights.hybrid import export_hybrid_npz

# Tiny but complete: two stages (a projecting and a plain unit in the first), width 32 so that
# GroupNorm keeps its 32 groups, which checkpoints do not record.
LAYERS, WIDTH = (2, 1), 32


def timm_hybrid(num_classes: int = 5, img_size: int = 32, **vit) -> TimmViT:
    """timm's vit_base_r50_s16_224 recipe (_resnetv2 + HybridEmbed) at tiny sizes."""
    backbone = ResNetV2(
        layers=LAYERS,
        channels=tuple(4 * WIDTH * 2**i for i in range(len(LAYERS))),
        stem_chs=WIDTH,
        num_classes=0,
        global_pool="",
        preact=False,
        stem_type="same",
        conv_layer=partial(StdConv2dSame, eps=1e-8),
    )
    return TimmViT(
        img_size=img_size,
        patch_size=1,
        embed_dim=32,
        depth=2,
        num_heads=2,
        mlp_ratio=2.0,
        num_classes=num_classes,
        embed_layer=partial(HybridEmbed, backbone=backbone),
        **vit,
    )


def tiny_hybrid(**changes) -> ViTConfig:
    fields = dict(
        image_size=32,
        patch_size=1,
        dim=32,
        depth=2,
        num_heads=2,
        mlp_dim=64,
        num_classes=5,
        backbone=ResNetConfig(layers=LAYERS, width=WIDTH),
    )
    fields.update(changes)
    return ViTConfig(**fields)


@pytest.mark.integration
@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_timm_hybrid_state_dict_loads_with_inferred_backbone_and_same_logits(tmp_path, suffix):
    reference = randomise_(timm_hybrid()).eval()
    model = load(save_state_dict(reference, tmp_path / f"hybrid{suffix}"), num_heads=2)
    backbone = model.config.backbone
    assert backbone == ResNetConfig(
        layers=LAYERS, width=WIDTH, norm_eps=1e-5, weight_std="timm", weight_std_eps=1e-8
    )  # timm's numerics come with timm's weights
    assert model.config.image_size == (32, 32) and model.config.grid_size == (4, 4)
    x = images(32)
    with torch.no_grad():
        expected = reference(x)
        torch.testing.assert_close(model(x), expected, **TOLERANCE)
    assert expected.abs().max() > 1e-2


@pytest.mark.unit
def test_official_npz_round_trip_infers_the_architecture(tmp_path):
    model = randomise_(create_untrained(tiny_hybrid(act="gelu_tanh"))).eval()
    path = export_hybrid_npz(model, tmp_path / "R_tiny.npz")
    with np.load(path) as arrays:
        keys = set(arrays.files)
        assert {
            "conv_root/kernel",
            "gn_root/scale",
            "block1/unit1/conv_proj/kernel",
            "block1/unit2/gn3/bias",
            "block2/unit1/gn_proj/scale",
            "embedding/kernel",
            "cls",
        } <= keys
        assert "block1/unit2/conv_proj/kernel" not in keys  # only a stage's first unit projects
        assert arrays["conv_root/kernel"].shape == (7, 7, 3, WIDTH)  # HWIO
        assert arrays["gn_root/scale"].shape == (1, 1, 1, WIDTH)  # as the released files
        assert arrays["embedding/kernel"].shape == (1, 1, 4 * WIDTH * 2, 32)

    loaded = load(path)
    assert loaded.config.backbone == model.config.backbone  # vit_jax's numerics are the defaults
    assert (loaded.config.image_size, loaded.config.patch_size, loaded.config.in_channels) == ((32, 32), 1, 3)
    x = images(32)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=1e-6)

    # Newer files store GroupNorm parameters flat (C,): the same model.
    with np.load(path) as arrays:
        flat = {k: v.reshape(-1) if "/gn" in k else v for k, v in arrays.items()}
    np.savez(tmp_path / "flat.npz", **flat)
    with torch.no_grad():
        torch.testing.assert_close(load(tmp_path / "flat.npz")(x), model(x), rtol=0, atol=1e-6)


@pytest.mark.unit
def test_exported_npz_is_the_layout_timm_reads_as_official(tmp_path):
    """timm's loader for the released hybrid files puts every array where vitlab's does."""
    model = randomise_(create_untrained(tiny_hybrid())).eval()
    path = export_hybrid_npz(model, tmp_path / "R_tiny.npz")
    reference = timm_hybrid()
    reference.load_pretrained(str(path))
    via_timm = load(save_state_dict(reference, tmp_path / "timm.safetensors"), num_heads=2)
    expected = model.state_dict()
    for key, value in via_timm.state_dict().items():
        torch.testing.assert_close(value, expected[key], rtol=0, atol=0, msg=key)


@pytest.mark.unit
def test_loading_checks_the_backbone(tmp_path):
    model = randomise_(create_untrained(tiny_hybrid()))
    path = export_hybrid_npz(model, tmp_path / "R_tiny.npz")
    with np.load(path) as arrays:
        arrays = dict(arrays)
    missing = {k: v for k, v in arrays.items() if k != "block1/unit2/gn2/scale"}
    np.savez(tmp_path / "missing.npz", **missing)
    with pytest.raises(ValueError, match="missing backbone parameter block1/unit2/gn2/scale"):
        load(tmp_path / "missing.npz")
    extra = dict(arrays, **{"block1/unit2/conv_proj/kernel": np.zeros((1, 1, 128, 128), np.float32)})
    np.savez(tmp_path / "extra.npz", **extra)
    with pytest.raises(ValueError, match="no place for: block1/unit2/conv_proj/kernel"):
        load(tmp_path / "extra.npz")


@pytest.mark.integration
def test_hybrid_at_a_new_resolution(tmp_path):
    model = randomise_(create_untrained(tiny_hybrid()))
    path = export_hybrid_npz(model, tmp_path / "R_tiny.npz")
    loaded = load(path, image_size=64, num_classes=3)
    assert loaded.config.grid_size == (8, 8) and loaded.pos_embed.weight.shape == (1, 65, 32)
    assert loaded(images(64)).shape == (2, 3)
    # The new head is zero, so compare the representation with the file loaded as it is, then resized.
    reference = load(path)
    reference.set_image_size(64)
    with torch.no_grad():
        got = loaded.forward_head(loaded.forward_features(images(64)), pre_logits=True)
        expected = reference.forward_head(reference.forward_features(images(64)), pre_logits=True)
    torch.testing.assert_close(got, expected, **TOLERANCE)
    assert (got[0] - got[1]).abs().max() > 1e-3  # depends on the image


@pytest.mark.unit
def test_r50_b16_has_timm_layout_and_paper_sequence_length():
    import timm

    with torch.device("meta"):
        reference = timm.create_model("vit_base_r50_s16_224", num_classes=1000)
        model = create_untrained("R50+B/16")
    expected = {
        ("pos_embed.weight" if k == "pos_embed" else k): tuple(v.shape) for k, v in reference.state_dict().items()
    }
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == expected
    config = model.config
    assert config.backbone.layers == (3, 4, 9) and config.backbone.stride == 16 and config.patch_size == 1
    assert config.grid_size == (14, 14) and config.num_patches == 196  # 224 / 16 (Sec. 4.1)


@pytest.mark.unit
@pytest.mark.parametrize("name", list_models(family="hybrid"))
def test_registered_hybrids(name):
    config = config_for(name)
    if name == "R+Ti/16":  # AugReg's name: the ResNet stem alone (stride 4) and 8x8 patches on its map
        assert config.backbone.layers == () and config.patch_size == 8 and config.effective_patch_size == 32
        return
    assert config.effective_patch_size == int(name.rsplit("/", 1)[1])  # the /N of the name
    assert config.backbone.depth == int(name[1:].split("+")[0].removesuffix("-small"))
    if "-small" in name:  # 8x8 tokens at 32 px, as ViT-Ti/4
        assert config.image_size == (32, 32) and config.grid_size == (8, 8) and config.backbone.stem == "small"


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", [n for n in list_models(family="hybrid") if "-small" in n])
def test_small_image_hybrids_train_and_explain_at_32px(name):
    model = create_untrained(name, num_classes=3)
    x = images(32)
    randomise_(model.head, std=0.02)
    model(x).square().mean().backward()
    assert all(p.grad is not None for p in model.parameters())
    model.eval()
    with torch.no_grad():
        fused = model(x)
        explicit, attentions = model.forward_with_attention(x)
    torch.testing.assert_close(fused, explicit, **TOLERANCE)
    assert attentions[0].shape == (2, model.config.num_heads, 65, 65)


@pytest.mark.unit
def test_hybrid_config_round_trips_and_saves(tmp_path):
    config = tiny_hybrid(pool="gap")
    document = json.loads(json.dumps(config.to_dict()))
    assert document["backbone"]["layers"] == list(LAYERS)
    assert ViTConfig.from_dict(document) == config == ViTConfig.from_dict(config.to_dict())
    model = randomise_(create_untrained(config)).eval()
    reloaded = load(model.save_pretrained(tmp_path / "folder"))
    assert reloaded.config.backbone == config.backbone
    with torch.no_grad():
        torch.testing.assert_close(reloaded(images(32)), model(images(32)), rtol=0, atol=0)


@pytest.mark.unit
def test_hybrid_errors():
    with pytest.raises(ConfigError, match="not divisible by the hybrid's effective patch size 16"):
        create_untrained("R50+B/16", image_size=200)
    with pytest.raises(ConfigError, match="unknown hybrid 'R50\\+Q/16'"):
        create_untrained("R50+Q/16")
    with pytest.raises(ConfigError, match="unknown ResNet config keys: depth"):
        ViTConfig.from_dict({**tiny_hybrid().to_dict(), "backbone": {"depth": 50}})
    with pytest.raises(ConfigError, match="unknown model family"):
        list_models(family="cnn")
