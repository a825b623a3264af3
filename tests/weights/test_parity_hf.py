"""vitlab vs Hugging Face transformers ViT, random weights: an HF folder loads to HF's numbers."""

from __future__ import annotations

import itertools
import json

import pytest
import torch

import vitlab
from helpers import TOLERANCE, images, random_eval

pytestmark = pytest.mark.unit

transformers = pytest.importorskip("transformers")

SIZES = {"square_64": (64, 64), "wide_64x96": (64, 96)}  # HF ViT has a class token only
PATCHES = (8, 16, 32)


def hf_config(image_size=(32, 32), patch_size=8, **options):
    fields = dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=list(image_size),
        patch_size=patch_size,
    )
    return transformers.ViTConfig(**{**fields, **options})


def saved(model, directory):
    model.save_pretrained(directory)
    return directory


@pytest.mark.parametrize("size, patch", list(itertools.product(SIZES, PATCHES)))
def test_image_classification_logits(tmp_path, size, patch):
    image_size = SIZES[size]
    peer = random_eval(transformers.ViTForImageClassification(hf_config(image_size, patch, num_labels=5)))
    model = vitlab.load(saved(peer, tmp_path / "hf"))
    assert (model.config.act, model.config.norm_eps) == ("gelu", 1e-12)
    x = images(*image_size)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(pixel_values=x).logits, **TOLERANCE)


@pytest.mark.parametrize("pooler", [True, False], ids=["with_pooler", "no_pooler"])
def test_vit_model_features_and_pooler(tmp_path, pooler):
    """ViTModel's pooler (Dense + tanh on the class token) is the paper's representation layer."""
    peer = random_eval(transformers.ViTModel(hf_config(), add_pooling_layer=pooler))
    model = vitlab.load(saved(peer, tmp_path / "hf"))
    assert model.config.num_classes == 0
    assert model.config.representation_size == (64 if pooler else None)
    x = images()
    with torch.no_grad():
        out = peer(pixel_values=x)
        torch.testing.assert_close(model.forward_features(x), out.last_hidden_state, **TOLERANCE)
        expected = out.pooler_output if pooler else out.last_hidden_state[:, 0]
        torch.testing.assert_close(model(x), expected, **TOLERANCE)


@pytest.mark.parametrize(
    "options",
    [
        dict(hidden_act="gelu_new"),
        dict(hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6),
        dict(qkv_bias=False),
        dict(num_channels=1),
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()),
)
def test_config_numerics_are_followed(tmp_path, options):
    peer = random_eval(transformers.ViTForImageClassification(hf_config(num_labels=3, **options)))
    model = vitlab.load(saved(peer, tmp_path / "hf"))
    x = images(channels=options.get("num_channels", 3))
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(pixel_values=x).logits, **TOLERANCE)


def test_class_names_and_preprocessing_come_from_the_folder(tmp_path):
    labels = {0: "cat", 1: "dog", 2: "fish"}
    peer = transformers.ViTForImageClassification(
        hf_config(id2label=labels, label2id={v: k for k, v in labels.items()})
    )
    directory = saved(peer, tmp_path / "hf")
    (directory / "preprocessor_config.json").write_text(
        json.dumps({"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225], "resample": 3})
    )
    config = vitlab.load(directory).config
    assert config.class_names == ["cat", "dog", "fish"] and config.num_classes == 3
    assert config.preprocessing.mean == (0.485, 0.456, 0.406) and config.preprocessing.interpolation == "bicubic"
    default_names = vitlab.load(saved(transformers.ViTForImageClassification(hf_config(num_labels=2)), tmp_path / "d"))
    assert default_names.config.class_names is None  # HF's LABEL_0, LABEL_1 are placeholders


def test_pickle_weights_and_run_time_resampling_match_hf(tmp_path):
    """pytorch_model.bin is read with weights_only=True; images of another size are resampled
    at run time as HF's interpolate_pos_encoding does (bicubic, no antialiasing)."""
    peer = random_eval(transformers.ViTForImageClassification(hf_config(num_labels=4)))
    directory = tmp_path / "bin"
    directory.mkdir()
    peer.config.save_pretrained(directory)
    torch.save(peer.state_dict(), directory / "pytorch_model.bin")  # transformers >= 5 in-memory key names
    model = vitlab.load(directory)
    x = images(56, 40)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(pixel_values=x, interpolate_pos_encoding=True).logits, **TOLERANCE)
