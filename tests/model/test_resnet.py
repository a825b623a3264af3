"""BiT ResNet and the hybrid's backbone: parity with timm's ResNetV2, numerics, registry names."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from timm.layers import GroupNormAct, StdConv2d, StdConv2dSame
from timm.models.resnetv2 import ResNetV2

from helpers import randomise_
from vitlab.model import BiTConfig, BiTResNet, ConfigError, ResNetConfig, config_for, create_untrained, list_models
from vitlab.model.bit import bit_resnet_config
from vitlab.model.resnet import ResNet, pad_same
from vitlab.model.resnet import StdConv2d as VitlabStdConv2d


def timm_bit(layers, width, groups, num_classes):
    """timm's BiT ResNetV2 (stem_type 'fixed', StdConv2d eps 1e-8) at a tiny width."""
    return ResNetV2(
        layers=layers,
        channels=tuple(4 * width * 2**i for i in range(len(layers))),
        stem_chs=width,
        num_classes=num_classes,
        stem_type="fixed",
        conv_layer=partial(StdConv2d, eps=1e-8),
        norm_layer=partial(GroupNormAct, num_groups=groups),
    )


def timm_to_vitlab_bit(state):
    """timm's head is a 1x1 conv (K, C, 1, 1); vitlab's is a Linear. Every other key is shared."""
    state = dict(state)
    state["head.weight"] = state.pop("head.fc.weight").flatten(1)
    state["head.bias"] = state.pop("head.fc.bias")
    return state


@pytest.mark.integration
def test_bit_matches_timm_resnetv2():
    reference = randomise_(timm_bit((2, 1, 1), width=16, groups=8, num_classes=5)).eval()
    config = BiTConfig(resnet=bit_resnet_config(layers=(2, 1, 1), width=16, num_groups=8), num_classes=5)
    model = BiTResNet(config).eval()
    model.load_state_dict(timm_to_vitlab_bit(reference.state_dict()))
    images = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        expected = reference(images)
        torch.testing.assert_close(model(images), expected, rtol=0, atol=1e-5)
        torch.testing.assert_close(
            model.forward_features(images), reference.forward_features(images), rtol=0, atol=1e-5
        )
    assert expected.abs().max() > 1e-2  # random weights everywhere: a real comparison


@pytest.mark.integration
@pytest.mark.parametrize("size", [(32, 32), (37, 29)])  # odd sizes exercise SAME's uneven padding
def test_hybrid_backbone_matches_timm_same_padding(size):
    reference = ResNetV2(
        layers=(2, 1),
        channels=(64, 128),
        stem_chs=16,
        num_classes=0,
        global_pool="",
        preact=False,
        stem_type="same",
        conv_layer=partial(StdConv2dSame, eps=1e-8),
        norm_layer=partial(GroupNormAct, num_groups=8),
    )
    randomise_(reference).eval()
    config = ResNetConfig(layers=(2, 1), width=16, num_groups=8, norm_eps=1e-5, weight_std="timm", weight_std_eps=1e-8)
    model = ResNet(config).eval()
    model.load_state_dict(reference.state_dict())
    images = torch.randn(2, 3, *size)
    with torch.no_grad():
        expected = reference.forward_features(images)
        features = model(images)
    assert features.shape == expected.shape == (2, config.out_channels, -(-size[0] // 8), -(-size[1] // 8))
    torch.testing.assert_close(features, expected, rtol=0, atol=1e-5)


@pytest.mark.unit
def test_real_sizes_have_timm_layout():
    """BiT-R50x1 and the R50 backbone hold exactly timm's tensors (names and shapes)."""
    import timm

    with torch.device("meta"):
        reference = timm.create_model("resnetv2_50x1_bit", num_classes=1000)
        model = create_untrained("BiT-R50x1")
    expected = {k: tuple(v.shape) for k, v in timm_to_vitlab_bit(reference.state_dict()).items()}
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == expected
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(25.5e6, rel=0.01)  # BiT-M R50x1


@pytest.mark.unit
def test_weight_standardisation_follows_the_source():
    torch.manual_seed(0)
    weight = torch.randn(8, 4, 3, 3) * 3 + 1
    flat = weight.flatten(1)
    mean, var = flat.mean(1, keepdim=True), flat.var(1, unbiased=False, keepdim=True)
    formulas = {
        ("vit_jax", 1e-5): (flat - mean) / (var.sqrt() + 1e-5),  # models_resnet.weight_standardize
        ("timm", 1e-8): (flat - mean) / torch.sqrt(var + 1e-8),  # F.batch_norm in StdConv2d
    }
    for (kind, eps), expected in formulas.items():
        conv = VitlabStdConv2d(4, 8, 3, 1, ResNetConfig(weight_std=kind, weight_std_eps=eps))
        conv.weight.data.copy_(weight)
        standardised = conv.standardised_weight().flatten(1)
        torch.testing.assert_close(standardised, expected, rtol=0, atol=1e-6)
        torch.testing.assert_close(standardised.mean(1), torch.zeros(8), rtol=0, atol=1e-5)
    # The two sources differ measurably for small filters, which is why it is a config field.
    tiny = weight * 1e-4
    results = []
    for kind, eps in formulas:
        conv = VitlabStdConv2d(4, 8, 3, 1, ResNetConfig(weight_std=kind, weight_std_eps=eps))
        conv.weight.data.copy_(tiny)
        results.append(conv.standardised_weight())
    assert (results[0] - results[1]).abs().max() > 1e-3


@pytest.mark.unit
def test_pad_same_is_tensorflow_same():
    x = torch.ones(1, 1, 6, 7)
    padded = pad_same(x, kernel_size=3, stride=2)
    # Rows: out 3, total pad (3-1)*2+3-6 = 1, all at the bottom. Columns: out 4, (4-1)*2+3-7 = 2, one each side.
    assert padded.shape == (1, 1, 7, 9)
    assert padded[0, 0, -1].sum() == 0 and padded[0, 0, 0].sum() == 7
    assert padded[0, 0, :, 0].sum() == 0 and padded[0, 0, :, -1].sum() == 0


@pytest.mark.unit
@pytest.mark.parametrize("name", list_models(family="bit"))
def test_registered_bit_models(name):
    config = config_for(name)
    assert isinstance(config, BiTConfig) and config.resnet.preact
    depth, _, factor = name.removeprefix("BiT-R").removesuffix("-small").partition("x")
    assert config.resnet.depth == int(depth) and config.resnet.width == 64 * int(factor)
    if name.endswith("-small"):
        assert config.image_size == (32, 32) and config.resnet.stride == 8


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", [n for n in list_models(family="bit") if n.endswith("-small")])
def test_small_image_bit_models_train_at_32px(name):
    model = create_untrained(name, num_classes=3)
    images = torch.randn(2, 3, 32, 32)
    features = model.forward_features(images)
    assert features.shape == (2, model.config.feature_dim, 4, 4)
    assert (features[0] - features[1]).abs().max() > 0  # depends on the image
    randomise_(model.head, std=0.02)
    model.forward_head(features).square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert model.head.weight.grad.abs().max() > 0 and next(model.parameters()).grad.abs().max() > 0


@pytest.mark.integration
def test_bit_interface_for_training_and_few_shot():
    model = create_untrained("BiT-R26x1-small", num_classes=4).eval()
    assert (model.head.weight == 0).all()  # BiT fine-tunes from a zero head
    images = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        features = model.forward_head(model.forward_features(images), pre_logits=True)
    assert features.shape == (3, model.config.feature_dim)
    model.reset_classifier(7, class_names=[str(i) for i in range(7)])
    assert model(images).shape == (3, 7) and model.config.num_classes == 7
    decay_free = model.no_weight_decay()
    assert "stem.conv.weight" not in decay_free and "norm.weight" in decay_free and "head.bias" in decay_free

    model.train()
    randomise_(model)
    expected = model(images)
    model.set_grad_checkpointing(True)
    torch.testing.assert_close(model(images), expected)


@pytest.mark.unit
def test_config_round_trip_and_errors():
    config = config_for("BiT-R50x1-small", num_classes=10, class_names=list("abcdefghij"))
    assert BiTConfig.from_dict(config.to_dict()) == config
    assert ResNetConfig.from_dict({"layers": [1, 2], "width": 32}).layers == (1, 2)
    with pytest.raises(ConfigError, match="width 48 is not divisible by 32 GroupNorm groups"):
        ResNetConfig(width=48)
    with pytest.raises(ConfigError, match="unknown resnet stem 'tiny'"):
        ResNetConfig(stem="tiny")
    with pytest.raises(ConfigError, match="BiT-R51x1"):
        create_untrained("BiT-R51x1")
    with pytest.raises(ConfigError, match="unknown BiT config keys: pool"):
        BiTConfig.from_dict({"pool": "gap"})
    with pytest.raises(ValueError, match=r"expected images of shape \(batch, 3, height, width\)"):
        create_untrained("BiT-R26x1-small")(torch.randn(1, 1, 32, 32))
