"""Gated MLPs (SwiGLU, timm's SwiGLUPacked: DINOv2-giant's): every ViT timm registers with one, shrunk
with random weights, loads into vitlab with timm's logits (fp32, 1e-5), and vitlab writes gated models
back for timm."""

from __future__ import annotations

import pytest
import torch

import vitlab
from helpers import TOLERANCE, images, random_eval, save_state_dict, timm_vits
from vitlab.model import VisionTransformer, ViTConfig
from vitlab.weights.timm_writer import timm_config, timm_state_dict

timm = pytest.importorskip("timm")
timm_vit = pytest.importorskip("timm.models.vision_transformer")

pytestmark = pytest.mark.unit

SHRUNK = dict(img_size=28, patch_size=14, embed_dim=96, depth=2, num_heads=4)  # an even hidden width


# the models whose first block has a packed gated MLP (parallel blocks have no `mlp`)
GATED_VITS = timm_vits("vit_*", lambda model: isinstance(getattr(model.blocks[0], "mlp", None), timm.layers.GluMlp))


def test_timm_registers_dinov2_giant_with_a_gated_mlp():
    assert {"vit_giant_patch14_dinov2", "vit_giant_patch14_reg4_dinov2"} <= set(GATED_VITS)


@pytest.mark.parametrize("name", GATED_VITS)
def test_registered_gated_architecture_loads_with_timm_logits(tmp_path, name):
    peer = random_eval(timm.create_model(name, pretrained=False, num_classes=7, **SHRUNK))
    model = vitlab.load(save_state_dict(peer, tmp_path / "timm.safetensors"), num_heads=4)
    assert model.config.gated_mlp and model.config.act == "silu"
    x = images(28)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), **TOLERANCE)


def test_written_for_timm_gives_the_same_logits():
    config = ViTConfig(
        image_size=32, patch_size=8, dim=64, depth=2, num_heads=4, mlp_dim=96, num_classes=5, gated_mlp=True,
        act="silu", init_values=0.5,
    )  # fmt: skip
    model = random_eval(VisionTransformer(config))
    document = timm_config(model)
    assert document["architecture"] == "vit_giant_patch14_dinov2"
    peer = timm.create_model(document["architecture"], pretrained=False, **dict(document["model_args"], num_classes=5))
    peer.load_state_dict(timm_state_dict(model))
    x = images(32)
    with torch.no_grad():
        torch.testing.assert_close(peer.eval()(x), model(x), **TOLERANCE)
