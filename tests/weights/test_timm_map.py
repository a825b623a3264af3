"""MAP heads (multihead attention pooling, SigLIP's): every ViT timm registers with one, shrunk with
random weights, loads into vitlab with timm's logits (fp32, 1e-5) from a timm folder that names its
architecture, or is refused in one line naming the part vitlab lacks; vitlab writes MAP models back
for timm."""

from __future__ import annotations

import re

import pytest
import torch

import vitlab
from helpers import TOLERANCE, images, random_eval, save_state_dict, timm_folder, timm_vits
from vitlab.errors import CheckpointError, ConfigError
from vitlab.model import VisionTransformer, ViTConfig
from vitlab.weights.timm_writer import timm_config, timm_state_dict

timm = pytest.importorskip("timm")
timm_vit = pytest.importorskip("timm.models.vision_transformer")

pytestmark = pytest.mark.unit

SHRUNK = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4)
# (pattern on the name, what the refusal says): the parts vitlab's ViT lacks besides the MAP head.
REFUSED = [
    (r"_rope_", "Eva block"),
]


MAP_VITS = timm_vits("vit_*", lambda model: "attn_pool.latent" in model.state_dict())


def test_timm_registers_siglip_towers_with_map_heads():
    assert {"vit_base_patch16_siglip_224", "vit_so400m_patch14_siglip_224"} <= set(MAP_VITS)


@pytest.mark.parametrize("name", MAP_VITS)
def test_registered_map_architecture_loads_with_timm_logits_or_is_refused_by_name(tmp_path, name):
    width = dict(embed_dim=96) if "_giant_" in name else {}  # SwiGLUPacked needs an even hidden width
    peer = random_eval(timm.create_model(name, pretrained=False, num_classes=7, **{**SHRUNK, **width}))
    folder = timm_folder(peer, name, tmp_path / "folder", SHRUNK, num_classes=7)
    said = next((said for pattern, said in REFUSED if re.search(pattern, name)), None)
    if said is not None:
        with pytest.raises(CheckpointError, match=said):
            vitlab.load(folder)
        return
    model = vitlab.load(folder)
    assert model.config.pool == "map"
    x = images(32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), **TOLERANCE)


def test_bare_map_weights_pool_with_their_head(tmp_path):
    peer = random_eval(timm_vit.VisionTransformer(**SHRUNK, num_classes=7, global_pool="map", class_token=False))
    model = vitlab.load(save_state_dict(peer, tmp_path / "map.safetensors"), num_heads=4)
    x = images(32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), **TOLERANCE)


@pytest.mark.parametrize("registers", [0, 4])
def test_written_for_timm_gives_the_same_logits(registers):
    config = ViTConfig(
        image_size=32, patch_size=8, dim=64, depth=2, num_heads=4, mlp_dim=128, num_classes=5, pool="map",
        register_tokens=registers, act="gelu_tanh",
    )  # fmt: skip
    model = random_eval(VisionTransformer(config))
    document = timm_config(model)
    assert document["model_args"]["global_pool"] == "map"
    peer = timm_vit.VisionTransformer(**dict(document["model_args"], num_classes=5)).eval()
    peer.load_state_dict(timm_state_dict(model))
    x = images(32)
    with torch.no_grad():
        torch.testing.assert_close(peer(x), model(x), **TOLERANCE)


@pytest.mark.fault("timm_weights", kinds=1)
def test_a_map_head_is_not_added_by_reset_classifier():
    model = vitlab.create_model("Ti/16", image_size=32, depth=1, num_classes=3)
    with pytest.raises(ConfigError, match="without a MAP head"):
        model.reset_classifier(5, "map")
    mapped = VisionTransformer(ViTConfig(image_size=32, patch_size=8, dim=64, depth=1, num_heads=4, pool="map"))
    mapped.reset_classifier(5, "avg")  # as timm: another pool drops the MAP head
    assert mapped.attn_pool is None and mapped(images(32)).shape == (2, 5)
