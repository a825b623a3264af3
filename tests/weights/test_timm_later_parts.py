"""Layer scale, qk-norm and norm_pre: timm's registered ViTs with them, shrunk with random weights,
load into vitlab with timm's logits (fp32, 1e-5), and vitlab writes them back for timm."""

from __future__ import annotations

import pytest
import torch

import vitlab
from helpers import TOLERANCE, images, random_eval, save_state_dict
from vitlab.errors import CheckpointError
from vitlab.model import VisionTransformer, ViTConfig
from vitlab.weights.timm_writer import timm_config, timm_state_dict

timm = pytest.importorskip("timm")
timm_vit = pytest.importorskip("timm.models.vision_transformer")

SHRUNK = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=7)
LATER_KEYS = (".ls1.gamma", ".attn.q_norm.weight", "norm_pre.weight")


@pytest.mark.unit
@pytest.mark.parametrize(
    "name, part",
    [
        ("deit3_small_patch16_224", "init_values"),  # layer scale
        ("vit_base_patch16_224", "qk_norm"),  # no registered plain ViT has it: timm's keyword
    ],
)
def test_registered_architecture_loads_with_timm_logits(tmp_path, name, part):
    extra = {"qk_norm": True} if part == "qk_norm" else {}
    peer = random_eval(timm.create_model(name, pretrained=False, **SHRUNK, **extra))
    model = vitlab.load(save_state_dict(peer, tmp_path / "timm.safetensors"), num_heads=4)
    assert getattr(model.config, part) not in (None, False)
    x = images(32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), **TOLERANCE)


@pytest.mark.unit
def test_written_for_timm_gives_the_same_logits():
    config = ViTConfig(
        image_size=32,
        patch_size=8,
        dim=64,
        depth=2,
        num_heads=4,
        mlp_dim=128,
        num_classes=5,
        init_values=0.5,
        qk_norm=True,
        pre_norm=True,
    )
    model = random_eval(VisionTransformer(config))
    document = timm_config(model)
    args = dict(document["model_args"], num_classes=5)
    peer = timm_vit.VisionTransformer(**args).eval()
    peer.load_state_dict(timm_state_dict(model))
    x = images(32)
    with torch.no_grad():
        torch.testing.assert_close(peer(x), model(x), **TOLERANCE)


@pytest.mark.unit
def test_old_configs_build_the_plain_model():
    state = VisionTransformer(
        ViTConfig(image_size=32, patch_size=8, dim=64, depth=1, num_heads=4, mlp_dim=64)
    ).state_dict()
    assert not any(key.endswith(LATER_KEYS) for key in state) and "patch_embed.proj.bias" in state


@pytest.mark.unit
@pytest.mark.fault("timm_weights", kinds=1)
def test_rms_qk_norm_is_refused_by_name(tmp_path):
    peer = random_eval(timm_vit.VisionTransformer(**SHRUNK, qk_norm=True))
    state = {k: v for k, v in peer.state_dict().items() if not k.endswith(("q_norm.bias", "k_norm.bias"))}
    path = tmp_path / "timm.pth"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="qk-norm without bias"):
        vitlab.load(path, num_heads=4)
