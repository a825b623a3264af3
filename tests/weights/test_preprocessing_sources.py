"""Preprocessing taken from the library that published the weights, or said to be assumed: timm's
pretrained_cfg of a tag (every pretrained tag of an architecture vitlab reads), torchvision's weights
transforms, vit_jax's evaluation for npz, an HF folder's preprocessor_config.json (pixel for pixel
as transformers' own processor prepares a photo)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from PIL import Image

import vitlab
from helpers import images, random_eval, save_state_dict
from vitlab.errors import CheckpointError
from vitlab.evaluate.predict import eval_transform
from vitlab.model import Preprocessing, ViTConfig
from vitlab.model.bit import BiTConfig
from vitlab.model.timm_api import pretrained_cfg
from vitlab.weights.head_counts import head_table
from vitlab.weights.preprocessing import from_timm_cfg, timm_pretrained_cfg

timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")
sklearn_datasets = pytest.importorskip("sklearn.datasets")

DATA_KEYS = ("input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode")


def accepted_tags() -> list[str]:
    """timm's pretrained weights of every architecture vitlab reads: the head table's ViTs of the
    paper's block and pooling, and timm's BiT ResNets."""
    readable = {
        name
        for signature, behaviours in head_table().items()
        if signature.library == "timm"
        for behaviour, names in behaviours.items()
        if behaviour.block == "pre-norm" and behaviour.global_pool == ("token" if signature.class_token else "avg")
        for name in names
    }
    return [
        name
        for name in timm.list_pretrained()
        if name.split(".")[0] in readable or name.startswith("resnetv2_") and name.split(".")[0].endswith("_bit")
    ]


TAGS = accepted_tags()


def timm_data_config(name: str) -> dict:
    cfg = timm.models.get_pretrained_cfg(name).to_dict()
    return timm.data.resolve_data_config(pretrained_cfg=cfg)


@pytest.mark.unit
def test_every_accepted_tag_is_resolved_as_timm_resolves_it():
    assert len(TAGS) >= 130  # the ViT family and BiT as timm registers them
    for name in TAGS:
        cfg = timm_pretrained_cfg(name, "test")
        size = tuple(cfg["input_size"][1:])
        pre = from_timm_cfg(cfg, name)
        config = (  # a config, no model: a ViT's patch of 1 divides every size
            BiTConfig(image_size=size, preprocessing=pre)
            if name.startswith("resnetv2_")
            else ViTConfig(image_size=size, patch_size=1, preprocessing=pre)
        )
        ours = timm.data.resolve_data_config(pretrained_cfg=pretrained_cfg(config, None, "conv", True))
        theirs = timm_data_config(name)
        assert {k: ours[k] for k in DATA_KEYS} == {k: theirs[k] for k in DATA_KEYS}, name


@pytest.mark.unit
def test_timms_data_config_of_a_model_is_that_of_its_pretrained_cfg():
    """The comparison above reads the registry's cfg; timm's resolve_model_data_config reads the
    model's, which is the same record (checked on the meta device for both kinds)."""
    for name in ("vit_base_patch16_384.augreg_in21k_ft_in1k", "resnetv2_50x1_bit.goog_in21k_ft_in1k"):
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False)
        assert timm.data.resolve_model_data_config(model) == timm_data_config(name)


@pytest.mark.unit
@pytest.mark.parametrize("tag", ["vit_tiny_patch16_224.augreg_in21k", "augreg_in21k", "deit_tiny_patch16_224.fb_in1k"])
def test_a_timm_file_with_its_tag_takes_timms_preprocessing_and_says_so(tmp_path, caplog, tag):
    peer = random_eval(timm.create_model("vit_tiny_patch16_224", img_size=32, depth=2, num_classes=3))
    path = save_state_dict(peer, tmp_path / "vit.safetensors")
    full = tag if "." in tag else f"vit_tiny_patch16_224.{tag}"
    with caplog.at_level(logging.INFO, logger="vitlab"):
        if "." not in tag:  # a bare tag names weights of one architecture of these shapes, not of a shrunk copy
            with pytest.raises(CheckpointError, match=f"pretrained_tag={tag!r} names weights of none of"):
                vitlab.load(path, num_heads=3, pretrained_tag=tag)
            return
        model = vitlab.load(path, num_heads=3, pretrained_tag=tag)
    assert f"(timm's pretrained_cfg of {full})" in caplog.text
    ours = timm.data.resolve_model_data_config(model)
    theirs = timm_data_config(full)
    assert {k: ours[k] for k in DATA_KEYS if k != "input_size"} == {
        k: theirs[k] for k in DATA_KEYS if k != "input_size"
    }
    with torch.no_grad():
        torch.testing.assert_close(model(images(32)), peer(images(32)), rtol=1e-5, atol=1e-5)


@pytest.mark.unit
def test_a_bare_timm_file_says_the_preprocessing_it_assumes(tmp_path, caplog):
    peer = random_eval(timm.create_model("vit_tiny_patch16_224", img_size=32, depth=2, num_classes=3))
    with caplog.at_level(logging.INFO, logger="vitlab"):
        vitlab.load(save_state_dict(peer, tmp_path / "vit.pth"), num_heads=3)
    line = next(r.getMessage() for r in caplog.records if "preprocessing" in r.getMessage())
    assert "mean (0.5, 0.5, 0.5), std (0.5, 0.5, 0.5), crop_pct 0.9, crop_mode center, bicubic" in line
    assert "assumed" in line and "pretrained_tag=" in line


@pytest.mark.unit
def test_a_given_preprocessing_is_the_only_one_said(tmp_path, caplog):
    # The catalogue passes its entry's preprocessing for a timm file from the Hub cache: the log said
    # "assumed ... pass pretrained_tag=" first, for a preprocessing that was then not used.
    peer = random_eval(timm.create_model("vit_tiny_patch16_224", img_size=32, depth=2, num_classes=3))
    given = Preprocessing(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), crop_pct=0.875)
    with caplog.at_level(logging.INFO, logger="vitlab"):
        model = vitlab.load(save_state_dict(peer, tmp_path / "vit.pth"), num_heads=3, preprocessing=given)
    lines = [r.getMessage() for r in caplog.records if ": preprocessing " in r.getMessage()]
    assert len(lines) == 1 and "as given" in lines[0] and "crop_pct 0.875" in lines[0], lines
    assert model.config.preprocessing == given


@pytest.mark.unit
def test_a_timm_bit_file_with_its_tag_takes_its_size_and_preprocessing(tmp_path, caplog):
    with torch.device("meta"):
        shapes = timm.create_model("resnetv2_50x1_bit", num_classes=4).state_dict()
    state = {key: torch.zeros(value.shape) for key, value in shapes.items()}
    path = tmp_path / "bit.safetensors"
    from safetensors.torch import save_file

    save_file(state, str(path))
    with caplog.at_level(logging.INFO, logger="vitlab"):
        model = vitlab.load(path, pretrained_tag="goog_in21k_ft_in1k")
    assert model.config.image_size == (448, 448) and model.pretrained_cfg["architecture"] == "resnetv2_50x1_bit"
    theirs = timm_data_config("resnetv2_50x1_bit.goog_in21k_ft_in1k")
    assert {k: timm.data.resolve_model_data_config(model)[k] for k in DATA_KEYS} == {k: theirs[k] for k in DATA_KEYS}
    assert "(timm's pretrained_cfg of resnetv2_50x1_bit.goog_in21k_ft_in1k)" in caplog.text


@pytest.mark.unit
@pytest.mark.parametrize(
    "tag, crop, resize, interpolation",
    [("IMAGENET1K_V1", 224, 256, "bilinear"), ("ViT_B_16_Weights.IMAGENET1K_SWAG_LINEAR_V1", 224, 224, "bicubic")],
)
def test_a_torchvision_file_with_its_weights_tag_takes_their_transforms(tmp_path, tag, crop, resize, interpolation):
    torchvision_models = pytest.importorskip("torchvision.models")
    with torch.device("meta"):
        shapes = torchvision_models.vit_b_16().state_dict()
    from safetensors.torch import save_file

    save_file({k: torch.zeros(v.shape) for k, v in shapes.items()}, str(tmp_path / "vit_b_16.safetensors"))
    model = vitlab.load(tmp_path / "vit_b_16.safetensors", pretrained_tag=tag)
    pre = model.config.preprocessing
    assert int(crop / pre.crop_pct) == resize and (pre.interpolation, pre.crop_mode) == (interpolation, "center")
    assert pre.mean == (0.485, 0.456, 0.406) and pre.std == (0.229, 0.224, 0.225)


# -- transformers' image processors: vitlab prepares a photo as the folder's processor does ----------
PROCESSORS = {
    "vit-default": {"image_processor_type": "ViTImageProcessor", "size": {"height": 32, "width": 32}},
    "vit-no-size": {"image_processor_type": "ViTImageProcessor", "resample": 3},
    "deit-squash-and-crop": {
        "image_processor_type": "DeiTImageProcessor",
        "size": {"height": 36, "width": 36},
        "crop_size": {"height": 32, "width": 32},
        "image_mean": [0.485, 0.456, 0.406],
        "image_std": [0.229, 0.224, 0.225],
    },
    "bit-shorter-side": {
        "image_processor_type": "BitImageProcessor",
        "size": {"shortest_edge": 36},
        "crop_size": {"height": 32, "width": 32},
    },
    "convnext-crop-pct": {
        "image_processor_type": "ConvNextImageProcessor",
        "size": {"shortest_edge": 32},
        "crop_pct": 0.875,
    },
    "old-feature-extractor": {"feature_extractor_type": "ViTFeatureExtractor", "size": 32, "resample": 3},
}


def hf_folder(tmp_path, processor: dict):
    config = transformers.ViTConfig(
        hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128, image_size=32, patch_size=8
    )
    transformers.ViTForImageClassification(config).save_pretrained(tmp_path)
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(processor))
    return tmp_path


@pytest.mark.unit
@pytest.mark.parametrize("name", PROCESSORS)
def test_an_hf_folder_is_prepared_pixel_for_pixel_as_its_processor_prepares_it(tmp_path, caplog, name):
    folder = hf_folder(tmp_path, PROCESSORS[name])
    with caplog.at_level(logging.INFO, logger="vitlab"):
        model = vitlab.load(folder)
    assert f"{folder}: preprocessing " in caplog.text
    # a processor without a size resizes to its class default (224), which the model cannot take:
    # vitlab reads it at the model's size and says so; transformers is given that size here
    size = {"size": {"height": 32, "width": 32}} if name == "vit-no-size" else {}
    assert ("no size: the model's" in caplog.text) == bool(size)
    processor = transformers.AutoImageProcessor.from_pretrained(folder, backend="pil", **size)
    for array in sklearn_datasets.load_sample_images().images:
        photo = Image.fromarray(array)
        theirs = processor(photo, return_tensors="pt")["pixel_values"][0]
        ours = eval_transform(model.config)(photo)
        # the 36 x 53 resize leaves a 21-pixel margin: floor and round agree (k = 10 is even)
        assert theirs.shape == ours.shape and (theirs - ours).abs().max().item() < 1e-6, name


@pytest.mark.unit
@pytest.mark.fault("bad-checkpoint", kinds=3)
@pytest.mark.parametrize(
    "processor, message",
    [
        ({"image_processor_type": "SamImageProcessor"}, "image processor SamImageProcessor; vitlab reads"),
        ({"image_processor_type": "ViTImageProcessor", "size": {"height": 224, "width": 224}}, "makes 224x224 images"),
        ({"image_processor_type": "ViTImageProcessor", "size": 32, "do_rescale": False}, "does not rescale pixels"),
    ],
    ids=["unknown-processor", "another-size", "no-rescale"],
)
def test_a_processor_vitlab_cannot_reproduce_is_refused_by_name(tmp_path, processor, message):
    with pytest.raises(CheckpointError, match=message):
        vitlab.load(hf_folder(tmp_path, processor))


@pytest.mark.unit
def test_an_hf_folder_without_a_processor_says_what_it_assumes(tmp_path, caplog):
    folder = hf_folder(tmp_path, {})
    (folder / "preprocessor_config.json").unlink()
    with caplog.at_level(logging.INFO, logger="vitlab"):
        pre = vitlab.load(folder).config.preprocessing
    assert (pre.crop_pct, pre.crop_mode, pre.interpolation, pre.mean) == (1.0, "squash", "bilinear", (0.5,) * 3)
    assert "assumed, ViTImageProcessor's defaults: the folder has no preprocessor_config.json" in caplog.text


@pytest.mark.unit
def test_an_npz_takes_vit_jaxs_evaluation_and_says_so(tmp_path, caplog):
    path = vitlab.export_npz(vitlab.create_model("Ti/16", image_size=32, depth=1, num_classes=2), tmp_path / "m.npz")
    with caplog.at_level(logging.INFO, logger="vitlab"):
        pre = vitlab.load(path).config.preprocessing
    assert (pre.crop_pct, pre.crop_mode, pre.interpolation) == (1.0, "squash", "bilinear")
    assert "(vit_jax's evaluation: the layout records none)" in caplog.text
    assert np.allclose(pre.mean, 0.5) and np.allclose(pre.std, 0.5)
