"""vitlab vs timm's ResNetV2 / BiT, random weights: a `resnetv2_*_bit` state dict file loads as a
BiTResNet that gives timm's logits; timm's other ResNetV2s are refused by name."""

from __future__ import annotations

import pytest
import torch

import vitlab
from helpers import TOLERANCE, images, random_eval, save_state_dict
from vitlab.model import BiTResNet
from vitlab.weights import CheckpointError

timm = pytest.importorskip("timm")


def small_bit(**options):
    """timm's own BiT builder (stem "fixed", StdConv2d eps 1e-8, GroupNorm 32) with one unit per stage."""
    from timm.models.resnetv2 import _create_resnetv2_bit

    return random_eval(_create_resnetv2_bit("resnetv2_50x1_bit", layers=(1, 1, 1, 1), width_factor=1, **options))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_resnetv2_50x1_bit_file_gives_timms_logits(tmp_path):
    peer = random_eval(timm.create_model("resnetv2_50x1_bit", num_classes=5))
    model = vitlab.load(save_state_dict(peer, tmp_path / "bit.safetensors"))
    assert isinstance(model, BiTResNet)
    assert model.config.resnet.layers == (3, 4, 6, 3) and model.config.resnet.width == 64
    assert model.config.num_classes == 5 and model.config.preprocessing.mean == (0.5, 0.5, 0.5)
    x = images(48, 40)
    with torch.no_grad():
        expected = peer(x)
        torch.testing.assert_close(model(x), expected, **TOLERANCE)
        torch.testing.assert_close(
            model.forward_head(model.forward_features(x), pre_logits=True),
            peer.forward_head(peer.forward_features(x), pre_logits=True),
            **TOLERANCE,
        )
    assert expected.abs().max() > 1e-2


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_small_bit_pickle_headless_and_with_a_head(tmp_path):
    peer = small_bit(num_classes=4)
    model = vitlab.load(save_state_dict(peer, tmp_path / "bit.pth"))
    x = images(32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), **TOLERANCE)
    peer = small_bit(num_classes=0)
    path = save_state_dict(peer, tmp_path / "bit.safetensors")
    model = vitlab.load(path)
    assert model.config.num_classes == 0 and model.config.resnet.layers == (1, 1, 1, 1)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), **TOLERANCE)
    assert vitlab.load(path, num_classes=3).config.num_classes == 3


@pytest.mark.unit
@pytest.mark.fault("bad-checkpoint", kinds=3)
@pytest.mark.parametrize(
    "name, named",
    [("resnetv2_50", "BatchNorm"), ("resnetv2_50d_gn", "a deep stem"), ("resnetv2_50d_frn", "a deep stem")],
)
def test_other_resnetv2s_are_refused_by_name(tmp_path, name, named):
    peer = timm.create_model(name, num_classes=2, layers=(1, 1, 1, 1))
    path = save_state_dict(peer, tmp_path / "r.safetensors")
    with pytest.raises(CheckpointError, match=rf"r\.safetensors: a timm ResNetV2 with {named}"):
        vitlab.load(path)
