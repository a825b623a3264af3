"""DeiT's distillation token: timm's distilled DeiTs, shrunk with random weights, load into vitlab with
timm's logits (fp32, 1e-5), the mean of the class and distillation heads."""

from __future__ import annotations

import pytest
import torch

import vitlab
from helpers import TOLERANCE, images, random_eval, save_state_dict
from vitlab.errors import ConfigError
from vitlab.model import VisionTransformer, ViTConfig

timm = pytest.importorskip("timm")

pytestmark = pytest.mark.unit

SHRUNK = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=7)
DISTILLED = timm.list_models("deit_*distilled*")


def test_timm_registers_distilled_deits():
    assert "deit_tiny_distilled_patch16_224" in DISTILLED


@pytest.mark.parametrize("name", DISTILLED)
def test_distilled_deit_loads_with_timm_logits_and_features(tmp_path, name):
    peer = random_eval(timm.create_model(name, pretrained=False, **SHRUNK))
    model = vitlab.load(save_state_dict(peer, tmp_path / "timm.pth"), num_heads=4)
    assert model.config.distillation_token and model.config.num_prefix_tokens == 2
    x = images(32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), **TOLERANCE)
        features = peer.forward_features(x)
        torch.testing.assert_close(model.forward_head(features, pre_logits=True), peer.forward_head(features, True))


def test_reset_classifier_replaces_both_heads_with_zeros():
    config = ViTConfig(image_size=32, patch_size=8, dim=64, depth=1, num_heads=4, mlp_dim=64, num_classes=5)
    model = random_eval(VisionTransformer(config.replace(distillation_token=True)))
    model.reset_classifier(3)
    assert model.head_dist is not None and model.head_dist.weight.shape == (3, 64)
    assert not model.head_dist.weight.any() and not model(images(32)).any()


@pytest.mark.fault("config", kinds=1)
@pytest.mark.parametrize("options", [dict(pool="gap"), dict(register_tokens=2)])
def test_distillation_token_needs_the_class_token_pool_and_no_registers(options):
    with pytest.raises(ConfigError, match="distillation_token needs pool 'token'"):
        ViTConfig(distillation_token=True, **options)
