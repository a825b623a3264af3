"""vitlab vs torchvision's VisionTransformer, random weights: a `vit_*` state dict gives its logits."""

from __future__ import annotations

import pytest
import torch
from torchvision.models.vision_transformer import VisionTransformer as TorchvisionViT

import vitlab
from helpers import TOLERANCE, images, random_eval, save_state_dict
from vitlab.weights import CheckpointError

pytestmark = pytest.mark.unit


def torchvision_model(image_size=32, patch_size=8, hidden_dim=64, num_heads=4, **options):
    return random_eval(
        TorchvisionViT(
            image_size=image_size,
            patch_size=patch_size,
            num_layers=2,
            num_heads=num_heads,
            hidden_dim=hidden_dim,
            mlp_dim=128,
            **{"num_classes": 7, **options},
        )
    )


@pytest.mark.parametrize("patch", [8, 16, 32])
def test_torchvision_logits(tmp_path, patch):
    """torchvision: class token, square images only; 64 px is its non-224 resolution here."""
    peer = torchvision_model(64, patch)
    model = vitlab.load(save_state_dict(peer, tmp_path / "vit.pth"), num_heads=4)
    assert model.config.grid_size == (64 // patch, 64 // patch)
    x = images(64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), **TOLERANCE)


def test_representation_layer(tmp_path):
    peer = torchvision_model(representation_size=48)
    model = vitlab.load(save_state_dict(peer, tmp_path / "vit.safetensors"), num_heads=4)
    assert model.config.representation_size == 48
    x = images()
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), **TOLERANCE)


def test_head_count_comes_from_torchvision_architectures_or_num_heads(tmp_path):
    """A width torchvision defines no ViT of has no head count to read: the load asks for it."""
    peer = torchvision_model(hidden_dim=128, num_heads=2)
    path = save_state_dict(peer, tmp_path / "vit.pth")
    with pytest.raises(CheckpointError, match=r"vit\.pth: .*no torchvision architecture .*width 128.*pass num_heads="):
        vitlab.load(path)
    model = vitlab.load(path, num_heads=2)
    x = images()
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), **TOLERANCE)
    # A wrong head count loads (the shapes do not record it) but computes other numbers.
    wrong = vitlab.load(path, num_heads=4)
    with torch.no_grad():
        assert (wrong(x) - peer(x)).abs().max() > 1e-3
    assert (
        vitlab.load(
            save_state_dict(torchvision_model(hidden_dim=96, num_heads=3), tmp_path / "w.pth"), num_heads=3
        ).config.attn_head_dim
        == 32
    )


@pytest.mark.parametrize("new_size", [48, 64])
def test_resampling_at_load_matches_torchvision_interpolate_embeddings(tmp_path, new_size):
    """torchvision's own interpolate_embeddings (bicubic, align_corners=True) is the default for its files."""
    from torchvision.models.vision_transformer import interpolate_embeddings

    peer = torchvision_model(32, 8)
    path = save_state_dict(peer, tmp_path / "vit.pth")
    model = vitlab.load(path, num_heads=4, image_size=new_size)
    assert model.config.pos_resample == "bicubic_aligned"
    expected = interpolate_embeddings(new_size, 8, peer.state_dict())
    torch.testing.assert_close(model.pos_embed.weight, expected["encoder.pos_embedding"], rtol=0, atol=1e-5)
    resized = torchvision_model(new_size, 8)
    resized.load_state_dict(expected)
    x = images(new_size)
    with torch.no_grad():
        torch.testing.assert_close(model(x), resized(x), **TOLERANCE)
    timm_style = vitlab.load(path, num_heads=4, image_size=new_size, pos_resample="bicubic")
    assert (timm_style.pos_embed.weight - expected["encoder.pos_embedding"]).abs().max() > 1e-4
