"""Register tokens (Darcet et al. 2023): every ViT timm registers with them, shrunk with random weights,
loads into vitlab with timm's logits (fp32, 1e-5), or is refused in one line naming the part vitlab lacks;
vitlab writes them back for timm."""

from __future__ import annotations

import re

import pytest
import torch

import vitlab
from helpers import TOLERANCE, images, random_eval, save_state_dict
from vitlab.errors import CheckpointError, ConfigError
from vitlab.model import VisionTransformer, ViTConfig
from vitlab.weights.timm_writer import timm_config, timm_state_dict

timm = pytest.importorskip("timm")
timm_vit = pytest.importorskip("timm.models.vision_transformer")

pytestmark = pytest.mark.unit

SHRUNK = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=7)
REGISTER_VITS = [name for name in timm.list_models("*reg*") if name.startswith(("vit_", "naflexvit_"))]
# (pattern on the name, what the refusal says): the parts vitlab's ViT lacks.
REFUSED = [
    (r"^naflexvit_", "unknown checkpoint format"),  # NaFlexVit, another class with its own keys
    (r"_rope_", "Eva block"),
    (r"_dpwee_|_pwee_", "fused parallel blocks"),
    (r"_dlittle_|_dwee_", "differential attention"),
]


def refusal(name: str) -> str | None:
    return next((said for pattern, said in REFUSED if re.search(pattern, name)), None)


def test_timm_registers_such_models():
    assert "vit_small_patch14_reg4_dinov2" in REGISTER_VITS and "vit_base_patch16_reg4_gap_256" in REGISTER_VITS


@pytest.mark.parametrize("name", REGISTER_VITS)
def test_registered_architecture_loads_with_timm_logits_or_is_refused_by_name(tmp_path, name):
    width = dict(embed_dim=96) if "_giant_" in name else {}  # SwiGLUPacked needs an even hidden width
    peer = random_eval(timm.create_model(name, pretrained=False, **{**SHRUNK, **width}))
    path = save_state_dict(peer, tmp_path / "timm.safetensors")
    said = refusal(name)
    if said is not None:
        with pytest.raises(CheckpointError, match=said):
            vitlab.load(path, num_heads=4)
        return
    model = vitlab.load(path, num_heads=4)
    assert model.config.register_tokens == peer.num_reg_tokens > 0
    x = images(32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), **TOLERANCE)


@pytest.mark.parametrize("pool", ["token", "gap"])
def test_written_for_timm_gives_the_same_logits(pool):
    config = ViTConfig(
        image_size=32, patch_size=8, dim=64, depth=2, num_heads=4, mlp_dim=128, num_classes=5,
        pool=pool, register_tokens=4,
    )  # fmt: skip
    model = random_eval(VisionTransformer(config))
    document = timm_config(model)
    peer = timm_vit.VisionTransformer(**dict(document["model_args"], num_classes=5)).eval()
    peer.load_state_dict(timm_state_dict(model))
    x = images(32)
    with torch.no_grad():
        torch.testing.assert_close(peer(x), model(x), **TOLERANCE)


def test_registers_come_after_the_class_token_and_gap_skips_them():
    config = ViTConfig(
        image_size=32, patch_size=8, dim=64, depth=1, num_heads=4, mlp_dim=64, pool="gap", register_tokens=3
    )
    model = random_eval(VisionTransformer(config))
    z, grid = model.embed(images(32))
    assert config.num_prefix_tokens == 3 and z.shape[1] == 3 + grid[0] * grid[1]
    torch.testing.assert_close(z[:, :3] - model.pos_embed(grid)[:, :3], model.reg_token.expand(2, -1, -1))
    tokens = model.encode(images(32))[0]
    shifted = torch.cat([tokens[:, :3] + 100.0, tokens[:, 3:]], dim=1)  # timm's avg pool reads patches only
    torch.testing.assert_close(model.forward_head(shifted), model.forward_head(tokens))


@pytest.mark.fault("config", kinds=1)
def test_negative_register_count_is_refused():
    with pytest.raises(ConfigError, match="register_tokens"):
        ViTConfig(register_tokens=-1)
