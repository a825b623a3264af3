"""vitlab vs timm, random weights: a timm state dict loaded by vitlab gives timm's logits (fp32, 1e-5)."""

from __future__ import annotations

import itertools

import pytest
import torch

import vitlab
from helpers import TOLERANCE, images, random_eval, save_state_dict

pytestmark = pytest.mark.unit

timm_vit = pytest.importorskip("timm.models.vision_transformer")
timm_layers = pytest.importorskip("timm.layers")

# Pooling as timm spells it: class token; GAP with the norm after pooling (timm's fc_norm, its
# default for "avg"); GAP with the norm before pooling (fc_norm=False, as vit_jax).
POOLS = {
    "token": dict(class_token=True, global_pool="token"),
    "gap_fc_norm": dict(class_token=False, global_pool="avg", fc_norm=True),
    "gap_norm_first": dict(class_token=False, global_pool="avg", fc_norm=False),
}
SIZES = {"square_64": (64, 64), "wide_64x96": (64, 96)}  # non-224, and non-square
PATCHES = (8, 16, 32)


def timm_model(image_size, patch_size, **options):
    return random_eval(
        timm_vit.VisionTransformer(
            img_size=image_size, patch_size=patch_size, embed_dim=64, depth=2, num_heads=4, num_classes=7, **options
        )
    )


@pytest.mark.parametrize("pool, size, patch", list(itertools.product(POOLS, SIZES, PATCHES)))
def test_timm_logits(tmp_path, pool, size, patch):
    image_size = SIZES[size]
    peer = timm_model(image_size, patch, **POOLS[pool])
    path = save_state_dict(peer, tmp_path / "timm.safetensors")
    model = vitlab.load(path, num_heads=4, image_size=image_size)
    assert model.config.pool == ("token" if pool == "token" else "gap")
    assert pool == "token" or model.config.gap_norm == ("after_pool" if pool == "gap_fc_norm" else "before_pool")
    assert model.config.grid_size == (image_size[0] // patch, image_size[1] // patch)
    x = images(*image_size)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), **TOLERANCE)
        torch.testing.assert_close(
            model.forward_head(model.forward_features(x), pre_logits=True),
            peer.forward_head(peer.forward_features(x), pre_logits=True),
            **TOLERANCE,
        )


@pytest.mark.parametrize(
    "options",
    [dict(qkv_bias=False), dict(no_embed_class=True), dict(num_classes=0), dict(in_chans=1)],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_timm_options(tmp_path, options):
    options = {"num_classes": 7, **options}
    channels = options.pop("in_chans", 3)
    peer = random_eval(
        timm_vit.VisionTransformer(
            img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, in_chans=channels, **options
        )
    )
    model = vitlab.load(save_state_dict(peer, tmp_path / "timm.pth"), num_heads=4)
    x = images(32, channels=channels)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), **TOLERANCE)


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_resampling_at_load_matches_timm(tmp_path, mode):
    """Loading at a new size = timm's model at that size with resample_abs_pos_embed's table."""
    peer = timm_model(32, 8)
    path = save_state_dict(peer, tmp_path / "timm.safetensors")
    model = vitlab.load(path, num_heads=4, image_size=(48, 64), pos_resample=mode)
    resized = timm_model((48, 64), 8)
    state = peer.state_dict()
    state["pos_embed"] = timm_layers.resample_abs_pos_embed(state["pos_embed"], [6, 8], [4, 4], 1, interpolation=mode)
    resized.load_state_dict(state)
    x = images(48, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), resized(x), **TOLERANCE)


def test_run_time_resampling_matches_timm_dynamic_size(tmp_path):
    """Images of another size at run time: timm's dynamic_img_size resamples bicubic as vitlab does."""
    peer = random_eval(
        timm_vit.VisionTransformer(
            img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=7, dynamic_img_size=True
        )
    )
    model = vitlab.load(save_state_dict(peer, tmp_path / "timm.safetensors"), num_heads=4)
    x = images(48, 40)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), **TOLERANCE)
