"""CLIP image towers (norm_pre, torch's LayerNorm epsilon, QuickGELU in OpenAI's): every ViT timm
registers with norm_pre, shrunk with random weights, loads into vitlab with timm's logits (fp32, 1e-5)
from a timm folder that names its architecture; the bare weights, which cannot tell the QuickGELU
twins apart, ask for act= by name; vitlab writes QuickGELU models back for timm (the round trip reads them back from timm and HF folders)."""

from __future__ import annotations

import pytest
import torch

import vitlab
from helpers import TOLERANCE, images, random_eval, timm_folder, timm_vits
from vitlab.errors import CheckpointError
from vitlab.model import VisionTransformer, ViTConfig
from vitlab.weights.head_counts import behaviour_of_model
from vitlab.weights.head_table import ACTIVATIONS
from vitlab.weights.timm_writer import timm_config, timm_state_dict

timm = pytest.importorskip("timm")
timm_vit = pytest.importorskip("timm.models.vision_transformer")

pytestmark = pytest.mark.unit

SHRUNK = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4)


NORM_PRE_VITS = timm_vits("*clip*", lambda model: "norm_pre.weight" in model.state_dict())


def test_timm_registers_clip_towers_of_both_activations():
    assert {"vit_base_patch16_clip_224", "vit_base_patch16_clip_quickgelu_224"} <= set(NORM_PRE_VITS)


@pytest.mark.parametrize("name", NORM_PRE_VITS)
def test_registered_clip_tower_loads_with_timm_logits(tmp_path, name):
    peer = random_eval(timm.create_model(name, pretrained=False, num_classes=7, **SHRUNK))
    model = vitlab.load(timm_folder(peer, name, tmp_path / "folder", SHRUNK, num_classes=7))
    block = peer.blocks[0]
    assert model.config.pre_norm and model.config.norm_eps == block.norm1.eps
    assert model.config.act == ACTIVATIONS[type(block.mlp.act).__name__]  # QuickGELU in the quickgelu twins
    x = images(32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), **TOLERANCE)


def test_the_table_knows_each_towers_activation_and_epsilon():
    quick, plain = (behaviour_of_model(f"vit_base_patch16_clip{s}_224") for s in ("_quickgelu", ""))
    assert quick is not None and plain is not None
    assert (quick.act, quick.norm_eps, plain.act, plain.norm_eps) == ("quick_gelu", 1e-5, "gelu", 1e-5)


@pytest.mark.fault("timm_weights", kinds=1)
def test_bare_clip_weights_ask_for_the_activation(tmp_path):
    # Full-size shapes on the meta device: the table holds both twins under one signature.
    with torch.device("meta"):
        peer = timm.create_model("vit_base_patch16_clip_quickgelu_224", pretrained=False)
    state = {key: torch.zeros(value.shape) for key, value in peer.state_dict().items()}
    path = tmp_path / "clip.pth"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="act="):
        vitlab.load(path)


def test_quick_gelu_written_for_timm_gives_the_same_logits():
    config = ViTConfig(
        image_size=32, patch_size=8, dim=64, depth=2, num_heads=4, mlp_dim=128, num_classes=5, act="quick_gelu"
    )
    model = random_eval(VisionTransformer(config))
    document = timm_config(model)
    assert document["model_args"]["act_layer"] == "quick_gelu"
    peer = timm_vit.VisionTransformer(**dict(document["model_args"], num_classes=5)).eval()
    peer.load_state_dict(timm_state_dict(model))
    x = images(32)
    with torch.no_grad():
        torch.testing.assert_close(peer(x), model(x), **TOLERANCE)
