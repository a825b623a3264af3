"""Files of the ViT family that vitlab's ViT computes, which it used to refuse, now load within 1e-5
of their library: timm without E_pos, timm train.py checkpoints (*.pth.tar, an argparse Namespace
inside), timm DeiT folders, transformers' gelu_python / gelu_accurate, big_vision's sincos2d E_pos
and the image tower of its two-tower models. What vitlab's ViT does not compute is refused by name."""

from __future__ import annotations

import argparse
import json
import logging

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import vitlab
from helpers import TOLERANCE, images, random_eval, save_state_dict
from vitlab.errors import CheckpointError

timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.unit


def tiny_timm(**options) -> torch.nn.Module:
    fields = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=5) | options
    return random_eval(timm.models.vision_transformer.VisionTransformer(**fields))


def timm_folder(model: torch.nn.Module, folder, architecture: str, **document) -> None:
    """A folder as timm's hub writer lays it out: config.json beside model.safetensors."""
    folder.mkdir()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architecture": architecture, **document}))


def same_logits(ours, theirs, size=(32, 32)) -> None:
    x = images(*size)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), **TOLERANCE)


# -- timm -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("class_token", [True, False], ids=["token", "avg"])
def test_timm_without_a_position_embedding_loads(tmp_path, class_token):
    pool = "token" if class_token else "avg"
    peer = tiny_timm(pos_embed="none", class_token=class_token, global_pool=pool)
    model = vitlab.load(save_state_dict(peer, tmp_path / "vit.safetensors"), num_heads=4, image_size=32)
    assert model.config.pos_embed == "none"
    same_logits(model, peer)


def test_a_timm_train_py_checkpoint_loads_with_its_architecture_and_command_line(tmp_path, caplog):
    """timm's train.py saves {'arch', 'state_dict', 'optimizer', 'args': Namespace, ...} as *.pth.tar;
    the Namespace is read as plain attributes and nothing in the file runs."""
    peer = random_eval(timm.create_model("vit_tiny_patch16_224", img_size=32, depth=2, num_classes=5))
    args = argparse.Namespace(model="vit_tiny_patch16_224", crop_pct=0.95, mean=None, lr=1e-3, img_size=32)
    checkpoint = {
        "epoch": 3,
        "arch": "vit_tiny_patch16_224",
        "state_dict": peer.state_dict(),
        "optimizer": {"state": {}, "param_groups": [{"lr": 1e-3}]},
        "version": 2,
        "args": args,
        "metric": 71.5,
    }
    torch.save(checkpoint, tmp_path / "model_best.pth.tar")
    with caplog.at_level(logging.INFO, logger="vitlab"):
        model = vitlab.load(tmp_path / "model_best.pth.tar")
    assert model.config.num_heads == 3 and model.config.name == "vit_tiny_patch16_224"
    assert model.config.preprocessing.crop_pct == 0.95  # the command line's, over timm's 0.9
    assert "timm's pretrained_cfg of vit_tiny_patch16_224, with train.py's crop_pct" in caplog.text
    same_logits(model, peer)


def test_timm_deit_folders_load_distilled_or_not(tmp_path):
    peer = random_eval(timm.create_model("deit_tiny_patch16_224", img_size=32, depth=2, num_classes=5))
    timm_folder(peer, tmp_path / "deit", "deit_tiny_patch16_224.fb_in1k", model_args={"img_size": 32, "depth": 2})
    model = vitlab.load(tmp_path / "deit")
    same_logits(model, peer)
    assert model.config.preprocessing.mean == (0.485, 0.456, 0.406)  # DeiT's, not the ViT default
    distilled = random_eval(timm.create_model("deit_tiny_distilled_patch16_224", img_size=32, depth=1))
    timm_folder(distilled, tmp_path / "distilled", "deit_tiny_distilled_patch16_224", model_args={"depth": 1})
    model = vitlab.load(tmp_path / "distilled", num_heads=3)  # head_counts.json has no distilled DeiT yet
    assert model.config.distillation_token
    same_logits(model, distilled)  # the mean of the class and distillation heads


@pytest.mark.fault("bad-checkpoint", kinds=3)
@pytest.mark.parametrize(
    "architecture, module",
    [
        ("vit_relpos_base_patch16_224", "timm.models.vision_transformer_relpos"),
        ("beit_base_patch16_224", "timm.models.beit"),
        ("convnext_tiny", "timm.models.convnext"),
    ],
)
def test_a_timm_folder_of_another_family_is_refused_by_its_name(tmp_path, architecture, module):
    timm_folder(tiny_timm(), tmp_path / "other", architecture)
    with pytest.raises(CheckpointError, match=rf"timm's {architecture} \({module}\) is not a model vitlab holds"):
        vitlab.load(tmp_path / "other")


@pytest.mark.fault("bad-checkpoint", kinds=2)
@pytest.mark.parametrize("name", ["davit_tiny", "poolformerv2_s12"])
def test_timm_stage_models_that_are_not_resnetv2_are_not_called_bit(tmp_path, name):
    with torch.device("meta"):
        keys = list(timm.create_model(name).state_dict())
    save_file({key: torch.zeros(1) for key in keys}, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="without ResNetV2 bottleneck units") as refusal:
        vitlab.load(tmp_path / "model.safetensors")
    assert "BiT" not in str(refusal.value).split(":")[1]


def test_a_class_token_with_average_pooling_loads_and_what_the_keys_cannot_tell_is_said(tmp_path, caplog):
    """timm pools over the patches beside a class token (global_pool='avg'). Its folder says so; a
    bare file shows fc_norm (timm's default placement for 'avg'), or nothing at all without it."""
    peer = tiny_timm(global_pool="avg", fc_norm=False)
    timm_folder(peer, tmp_path / "folder", "vit_base_patch16_224", model_args={"num_heads": 4, "global_pool": "avg"})
    model = vitlab.load(tmp_path / "folder")
    assert (model.config.pool, model.config.has_class_token, model.config.gap_norm) == ("gap", True, "before_pool")
    same_logits(model, peer)
    with_fc_norm = tiny_timm(global_pool="avg")
    with caplog.at_level(logging.INFO, logger="vitlab"):
        same_logits(vitlab.load(save_state_dict(with_fc_norm, tmp_path / "fc.pth"), num_heads=4), with_fc_norm)
        vitlab.load(save_state_dict(peer, tmp_path / "vit.pth"), num_heads=4)
    assert "a class token and fc_norm: timm's global_pool 'avg'" in caplog.text
    assert "class-token pooling" in caplog.text  # the keys of the second are a token model's: said


def test_num_heads_for_shapes_no_timm_architecture_has_says_which_gelu(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="vitlab"):
        vitlab.load(save_state_dict(tiny_timm(), tmp_path / "vit.pth"), num_heads=4)
    said = "no timm architecture of these shapes has 4 heads: exact GELU and LayerNorm eps 1e-06 (timm's ViT defaults)"
    assert said in caplog.text and "pass act= and norm_eps=" in caplog.text


# -- transformers -------------------------------------------------------------------------------------
@pytest.mark.parametrize("act, ours", [("gelu_python", "gelu"), ("gelu_accurate", "gelu_tanh")])
def test_transformers_gelu_spellings_load(tmp_path, act, ours):
    config = transformers.ViTConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=32,
        patch_size=8,
        num_labels=5,
        hidden_act=act,
    )
    peer = random_eval(transformers.ViTForImageClassification(config))
    peer.save_pretrained(tmp_path / "hf")
    model = vitlab.load(tmp_path / "hf")
    assert model.config.act == ours
    x = images(32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(pixel_values=x).logits, **TOLERANCE)


# -- big_vision ---------------------------------------------------------------------------------------
def posemb_sincos_2d(h: int, w: int, width: int, temperature: float = 10_000.0) -> np.ndarray:
    """big_vision models/vit.py posemb_sincos_2d, in NumPy."""
    y, x = np.mgrid[:h, :w]
    omega = np.arange(width // 4) / (width // 4 - 1)
    omega = 1.0 / (temperature**omega)
    y = np.einsum("m,d->md", y.flatten(), omega)
    x = np.einsum("m,d->md", x.flatten(), omega)
    return np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)[None].astype(np.float32)


def gap_model_with_sincos_table() -> vitlab.VisionTransformer:
    """A learned-E_pos GAP model whose table is big_vision's sincos2d: the reference."""
    model = vitlab.create_model(
        "Ti/16", image_size=32, patch_size=8, depth=2, num_classes=5, pool="gap", gap_norm="before_pool"
    )
    random_eval(model)
    with torch.no_grad():
        model.pos_embed.weight.copy_(torch.from_numpy(posemb_sincos_2d(4, 4, model.config.dim)))
    return model


def test_big_visions_sincos2d_loads_as_vitlabs_sincos(tmp_path, caplog):
    reference = gap_model_with_sincos_table()
    arrays = dict(np.load(vitlab.export_npz(reference, tmp_path / "learned.npz")))
    del arrays["Transformer/posembed_input/pos_embedding"]  # posemb="sincos2d": computed, not stored
    np.savez(tmp_path / "sincos.npz", **{f"params/{k}": v for k, v in arrays.items()})
    with caplog.at_level(logging.INFO, logger="vitlab"):
        model = vitlab.load(tmp_path / "sincos.npz", act="gelu", image_size=32)
    assert model.config.pos_embed == "sincos" and "big_vision's fixed sincos2d" in caplog.text
    same_logits(model, reference)


def test_the_image_tower_of_a_two_tower_checkpoint_loads_and_a_map_head_is_refused_by_name(tmp_path, caplog):
    reference = random_eval(vitlab.create_model("Ti/16", image_size=32, patch_size=8, depth=2, num_classes=16))
    arrays = dict(np.load(vitlab.export_npz(reference, tmp_path / "img.npz")))
    tower = {f"params/img/{k}": v for k, v in arrays.items()}
    text = {"params/txt/Encoder_0/encoder_norm/scale": np.ones(8, np.float32), "params/t": np.ones(1, np.float32)}
    np.savez(tmp_path / "lit.npz", **tower, **text)
    with caplog.at_level(logging.INFO, logger="vitlab"):
        model = vitlab.load(tmp_path / "lit.npz", act="gelu")
    assert "the image tower (params/img/) of a two-tower model; 2 other arrays not read" in caplog.text
    same_logits(model, reference)
    siglip = {**tower, "params/img/MAPHead_0/probe": np.zeros((1, 1, 192), np.float32), **text}
    np.savez(tmp_path / "siglip.npz", **siglip)
    with pytest.raises(CheckpointError, match=r"cannot hold a MAP attention-pool head \(big_vision pool_type 'map'\)"):
        vitlab.load(tmp_path / "siglip.npz")
