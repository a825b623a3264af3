"""vitlab's own folder: save_pretrained -> load, config.json versions, overrides, bad folders."""

from __future__ import annotations

import json
import logging
import re

import pytest
import torch
from safetensors.torch import load_file, save_file

import vitlab
from helpers import randomise_
from vitlab.model import Preprocessing, ViTConfig, create_untrained
from vitlab.weights import CheckpointError
from vitlab.weights.folder import FORMAT_VERSION, read_config

pytestmark = pytest.mark.unit

TINY = dict(image_size=32, patch_size=8, dim=32, depth=2, num_heads=4, mlp_dim=64, num_classes=5)


def randomise(model: torch.nn.Module) -> torch.nn.Module:
    return randomise_(model).eval()


def images(height: int = 32, width: int = 32, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, height, width, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"pool": "gap", "gap_norm": "after_pool"},
        {"pool": "gap", "gap_norm": "before_pool", "act": "gelu_tanh"},
        {"representation_size": 24, "norm_eps": 1e-12},
        {"pos_embed": "2d", "qkv_bias": False},
        {"pos_embed": "relative_bias", "pos_resample": "bilinear"},
        {"pos_embed": "relative"},
        {"pos_embed": "learned", "pos_embed_at": "every_layer"},
        {"pos_embed": "2d", "pos_embed_at": "every_layer_shared"},
        {"pos_embed": "sincos", "pool": "gap"},
        {"image_size": (32, 16), "head_hidden": (16,)},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default",
)
def test_round_trip_gives_identical_logits_and_config(tmp_path, options):
    config = ViTConfig(
        **{**TINY, **options},
        class_names=list("abcde"),
        preprocessing=Preprocessing(mean=(0.4, 0.5, 0.6), std=(0.2, 0.3, 0.4), crop_pct=0.9),
    )
    model = randomise(create_untrained(config))
    vitlab.save_pretrained(model, tmp_path / "ckpt", note="hello")
    loaded = vitlab.load(tmp_path / "ckpt")
    assert loaded.config == model.config
    x = images(*model.config.image_size)
    assert torch.equal(loaded(x), model(x))


def test_config_json_is_versioned_and_grouped(tmp_path):
    model = create_untrained(ViTConfig(**TINY, act="gelu_tanh", class_names=list("abcde")))
    model.save_pretrained(tmp_path, epoch=3)
    document = json.loads((tmp_path / "config.json").read_text())
    assert document["format"] == "vitlab" and document["format_version"] == FORMAT_VERSION
    assert document["architecture"]["dim"] == 32 and document["architecture"]["image_size"] == [32, 32]
    assert document["numerics"] == {
        "act": "gelu_tanh",
        "norm_eps": 1e-6,
        "gap_norm": "before_pool",
        "pos_resample": "bicubic",
        "pos_resample_antialias": True,
    }
    assert document["preprocessing"]["mean"] == [0.5, 0.5, 0.5]
    assert document["class_names"] == list("abcde")
    assert document["extra"] == {"epoch": 3}
    assert set(load_file(str(tmp_path / "model.safetensors"))) == set(model.state_dict())
    assert read_config(tmp_path)[1] == {"epoch": 3}


# config.json of a GAP model as vitlab wrote it while timm's order was the default (format_version 3).
BEFORE_GAP_DEFAULT_CHANGED = {
    "format": "vitlab",
    "format_version": 3,
    "architecture": {
        **dict(image_size=[32, 32], patch_size=8, in_channels=3, num_classes=5, dim=32, depth=2, num_heads=4),
        **dict(mlp_dim=64, head_dim=None, pool="gap", representation_size=None, head_hidden=[], pos_embed="learned"),
        **dict(qkv_bias=True, backbone=None, pos_embed_at="input", embed_dropout=True, proj_dropout=True),
        "mlp_out_act": False,
    },
    "numerics": {
        "act": "gelu",
        "norm_eps": 1e-06,
        "gap_norm": "after_pool",
        "pos_resample": "bicubic",
        "pos_resample_antialias": True,
    },
    "regularisation": {"dropout": 0.0, "attn_dropout": 0.0, "drop_path": 0.0, "head_dropout": 0.0},
    "preprocessing": {"mean": [0.5] * 3, "std": [0.5] * 3, "crop_pct": 0.875, "interpolation": "bicubic"},
    "class_names": None,
    "name": None,
    "extra": {},
}


def test_a_gap_folder_from_before_the_default_changed_keeps_its_order_and_numbers(tmp_path):
    """Its config.json records gap_norm, so it loads with timm's order whatever today's default."""
    reference = randomise(create_untrained(ViTConfig(**TINY, pool="gap", gap_norm="after_pool")))
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(BEFORE_GAP_DEFAULT_CHANGED))
    loaded = vitlab.load(tmp_path)
    assert loaded.config.gap_norm == "after_pool" and ViTConfig(**TINY, pool="gap").gap_norm == "before_pool"
    x = images()
    assert torch.equal(loaded(x), reference(x))


def version_1_document(config: ViTConfig) -> dict:
    """A version-1 config.json (every field flat beside "format"), as that version was defined."""
    return {"format": "vitlab", "format_version": 1, **config.to_dict()}


def test_format_version_1_flat_file_still_loads(tmp_path):
    reference = randomise(create_untrained(ViTConfig(**TINY, pool="gap", act="gelu_tanh", name="tiny")))
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(version_1_document(reference.config)))
    loaded = vitlab.load(tmp_path)
    assert loaded.config == reference.config
    x = images()
    assert torch.equal(loaded(x), reference(x))


@pytest.mark.fault("bad-checkpoint", kinds=8)
def test_a_missing_field_is_refused_by_name_never_filled_with_a_default(tmp_path):
    """Today's default for a missing field would compute other numbers than the model was trained with."""
    from vitlab.model import BiTConfig, ResNetConfig
    from vitlab.model.bit import bit_resnet_config

    vit = create_untrained(ViTConfig(**TINY, act="gelu_tanh"))
    vit.save_pretrained(tmp_path / "vit")
    resnet = dict(layers=(1,), width=8, num_groups=8, stem="small")
    vitlab.save_pretrained(
        create_untrained(BiTConfig(resnet=bit_resnet_config(**resnet), num_classes=3)), tmp_path / "bit"
    )
    hybrid = create_untrained(ViTConfig(**{**TINY, "patch_size": 2}, backbone=ResNetConfig(**resnet)))
    vitlab.save_pretrained(hybrid, tmp_path / "hybrid")
    cases = [
        ("vit", ["numerics", "act"], "'numerics.act'"),
        ("vit", ["numerics", "norm_eps"], "'numerics.norm_eps'"),
        ("vit", ["architecture", "mlp_out_act"], "'architecture.mlp_out_act'"),
        ("vit", ["architecture", "pos_embed_at"], "'architecture.pos_embed_at'"),
        ("vit", ["preprocessing", "mean"], "'preprocessing.mean'"),
        ("hybrid", ["architecture", "backbone", "weight_std"], "'architecture.backbone.weight_std'"),
        ("bit", ["bit", "resnet", "norm_eps"], "'bit.resnet.norm_eps'"),
    ]
    for folder, path, named in cases:
        document = json.loads((tmp_path / folder / "config.json").read_text())
        part = document
        for step in path[:-1]:
            part = part[step]
        del part[path[-1]]
        with pytest.raises(
            CheckpointError, match=rf"config\.json: format_version {FORMAT_VERSION} holds {re.escape(named)}"
        ):
            read_config_document(document, tmp_path / "case")
    flat = version_1_document(vit.config)
    del flat["gap_norm"]
    with pytest.raises(CheckpointError, match=r"format_version 1 holds 'gap_norm', which is missing"):
        read_config_document(flat, tmp_path / "v1")


def read_config_document(document: dict, folder) -> None:
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(document))
    read_config(folder)


@pytest.mark.parametrize("version", [1, 2])
def test_relative_of_versions_1_and_2_loads_as_relative_bias(tmp_path, version):
    """Before version 3, pos_embed "relative" named the per-head 2-D logit bias; "relative" is now the
    paper's relative attention, so older files migrate to "relative_bias" and keep their numbers."""
    reference = randomise(create_untrained(ViTConfig(**TINY, pos_embed="relative_bias")))
    reference.save_pretrained(tmp_path)
    document = json.loads((tmp_path / "config.json").read_text())
    document["architecture"]["pos_embed"] = "relative"
    document["format_version"] = 2
    if version == 1:
        flat = {
            k: v for section in ("architecture", "numerics", "regularisation") for k, v in document[section].items()
        }
        document = {
            "format": "vitlab",
            "format_version": 1,
            **flat,
            **{k: document[k] for k in ("preprocessing", "class_names", "name")},
        }
    (tmp_path / "config.json").write_text(json.dumps(document))
    loaded = vitlab.load(tmp_path)
    assert loaded.config.pos_embed == "relative_bias" and loaded.config.pos_embed_at == "input"
    x = images()
    assert torch.equal(loaded(x), reference(x))
    assert FORMAT_VERSION == 5


@pytest.mark.fault("bad-checkpoint", kinds=2)
def test_an_axial_vit_is_saved_with_its_kind_and_an_unknown_kind_is_refused(tmp_path):
    vitlab.save_pretrained(create_untrained("Axial-Ti/16", image_size=32, depth=1), tmp_path)
    document = json.loads((tmp_path / "config.json").read_text())
    assert document["kind"] == "axial" and document["format_version"] == FORMAT_VERSION
    assert type(vitlab.load(tmp_path)).__name__ == "AxialViT"
    for kind in ("cnn", None):
        document["kind"] = kind
        (tmp_path / "config.json").write_text(json.dumps(document))
        with pytest.raises(CheckpointError, match="unknown model kind"):
            vitlab.load(tmp_path)


def test_newer_format_version_is_refused(tmp_path):
    create_untrained(ViTConfig(**TINY)).save_pretrained(tmp_path)
    document = json.loads((tmp_path / "config.json").read_text())
    document["format_version"] = FORMAT_VERSION + 1
    (tmp_path / "config.json").write_text(json.dumps(document))
    with pytest.raises(CheckpointError, match="newer than this vitlab reads"):
        vitlab.load(tmp_path)


def test_new_image_size_resamples_and_new_classes_reset_with_one_log_line_each(tmp_path, caplog):
    model = randomise(create_untrained(ViTConfig(**TINY)))
    model.save_pretrained(tmp_path)
    with caplog.at_level(logging.INFO, logger="vitlab"):
        loaded = vitlab.load(tmp_path, image_size=(48, 64), num_classes=3, class_names=["x", "y", "z"], dropout=0.1)
    lines = [r.getMessage() for r in caplog.records if r.name == "vitlab"]
    assert len(lines) == 2
    assert "4x4 to a 6x8 grid" in lines[0] and "5 classes -> 3" in lines[1]
    assert loaded.config.image_size == (48, 64) and loaded.config.dropout == 0.1
    assert loaded.config.class_names == ["x", "y", "z"]
    assert loaded.pos_embed.weight.shape == (1, 1 + 6 * 8, 32)
    assert torch.count_nonzero(loaded.head.weight) == 0  # the fine-tuning head starts at zero (Sec. 3.2)
    # The resampled table is the one the source model computes for that grid at run time.
    torch.testing.assert_close(loaded.pos_embed.weight, model.pos_embed((6, 8)), rtol=0, atol=0)


def test_weights_that_do_not_fit_name_every_offending_key(tmp_path):
    model = create_untrained(ViTConfig(**TINY))
    model.save_pretrained(tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    del state["blocks.1.norm1.weight"]
    state["blocks.0.mlp.fc1.weight"] = torch.zeros(10, 32)
    state["extra.weight"] = torch.zeros(1)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError) as error:
        vitlab.load(tmp_path)
    message = str(error.value)
    assert str(tmp_path) in message
    assert "missing keys: blocks.1.norm1.weight" in message
    assert "unexpected keys: extra.weight" in message
    assert "blocks.0.mlp.fc1.weight (10, 32) vs model (64, 32)" in message


def test_bad_folders(tmp_path):
    with pytest.raises(FileNotFoundError):
        vitlab.load(tmp_path / "absent")
    (tmp_path / "config.json").write_text(json.dumps({"format": "vitlab", "format_version": 2, "architecture": {}}))
    with pytest.raises(CheckpointError, match="model.safetensors"):
        vitlab.load(tmp_path)
    with pytest.raises(ValueError, match="JSON"):
        create_untrained(ViTConfig(**TINY)).save_pretrained(tmp_path / "x", bad=object())
