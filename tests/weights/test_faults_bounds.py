"""Nothing allocates before it is checked, and every bad field is one line naming its file.

A kilobyte of config.json or a few hundred kilobytes of safetensors can ask for terabytes; each
such file must be refused from the sizes it declares, in well under a second, with a message that
names the file and the limit. Config fields of the wrong type are refused where they are read.
"""

from __future__ import annotations

import json
import os
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import vitlab
from helpers import one_line_error
from vitlab.memory.budget import batches_in_flight, memory_needed, parameter_count
from vitlab.model import ConfigError, ViTConfig, create_untrained, list_models
from vitlab.weights import CheckpointError
from vitlab.weights.folder import FORMAT_VERSION

TINY = ViTConfig(
    image_size=16, patch_size=8, dim=32, depth=1, num_heads=2, mlp_dim=64, num_classes=3, class_names=["a", "b", "c"]
)
FAST = 5.0  # seconds: a refusal reads headers only; an attempted allocation takes far longer or dies


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return create_untrained(TINY).save_pretrained(tmp_path_factory.mktemp("tiny") / "model")


def edited(folder: Path, target: Path, edit=None, weights=None) -> Path:
    """A copy of `folder` whose config.json is changed by `edit` and whose weights `weights` writes."""
    target.mkdir(parents=True)
    document = json.loads((folder / "config.json").read_text())
    if edit is not None:
        edit(document)
    (target / "config.json").write_text(json.dumps(document))
    if weights is None:
        (target / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    else:
        weights(target / "model.safetensors")
    return target


def refused(source, expected: str, error=(CheckpointError, ConfigError), **options) -> str:
    start = time.perf_counter()
    with pytest.raises(error) as caught:
        vitlab.load(source, **options)
    message = str(caught.value)
    assert time.perf_counter() - start < FAST and "\n" not in message and expected in message, message
    return message


def architecture(**fields):
    return lambda document: document["architecture"].update(fields)


# -- sizes: counted from the config, checked before building ---------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize(
    "name",
    [
        *list_models(family="all"),
        "Ti/16:2d",
        "Ti/16:relative",
        "Ti/16:relative_bias",
        "Ti/16:learned@every_layer",
        "Ti/16:2d@every_layer",
        "Ti/16:2d@every_layer_shared",
        "Ti/4:flatten",
    ],
)
def test_the_parameter_count_is_the_models_own(name):
    variant, _, pos = name.partition(":")
    pos, _, where = pos.partition("@")
    options = (
        {"pos_embed": pos, "pos_embed_at": where or "input"}
        if pos in ("learned", "2d", "relative", "relative_bias")
        else {}
    )
    if pos == "flatten":
        options = {"pool": "flatten", "image_size": 32, "head_hidden": (64, 32)}
    with torch.device("meta"):
        model = create_untrained(variant, **options)
    assert parameter_count(model.config) == sum(p.numel() for p in model.parameters())


@pytest.mark.unit
def test_activations_grow_with_the_batch_and_training():
    one, many = memory_needed(TINY, 1), memory_needed(TINY, 64)
    assert 0 < one < many and memory_needed(TINY, 64, training=True) > many


@pytest.mark.unit
@pytest.mark.fault("allocation")  # one kind per parameter
@pytest.mark.parametrize(
    "edit",
    [
        architecture(depth=1_000_000),  # the issue's ~1 KB config.json
        architecture(dim=2**20, num_heads=1),
        architecture(mlp_dim=2**34),
        architecture(image_size=[2**16, 2**16]),  # 67M tokens: activations, not parameters
        lambda d: d.update(class_names=None) or architecture(num_classes=2**33)(d),
    ],
    ids=["depth", "dim", "mlp", "image-size", "classes"],
)
def test_configs_asking_for_too_much_memory_are_refused_before_building(folder, tmp_path, edit):
    message = refused(edited(folder, tmp_path / "big", edit), "config.json: the model needs about")
    assert "of memory available" in message and "--memory-limit" in message


@pytest.mark.unit
@pytest.mark.fault("allocation", kinds=3)
def test_zero_element_tensors_are_checked_before_anything_is_built(folder, tmp_path):
    state = create_untrained(TINY).state_dict()
    zero = {**state, "pos_embed.weight": torch.zeros(10**8, 0)}
    inside = edited(folder, tmp_path / "zero", weights=lambda p: save_file(zero, str(p)))
    refused(
        inside,
        "model.safetensors: checkpoint does not fit the model; shape mismatches: pos_embed.weight (100000000, 0)",
    )
    # A timm file whose E_pos claims 10^8 positions: 19 billion parameters inferred, refused unbuilt.
    timm_keys = {
        **{k: v for k, v in state.items() if k != "pos_embed.weight"},
        "pos_embed": torch.zeros(1, 10**8 + 1, 0),
    }
    save_file(timm_keys, str(tmp_path / "timm.safetensors"))
    assert (tmp_path / "timm.safetensors").stat().st_size < 100_000
    refused(tmp_path / "timm.safetensors", "timm.safetensors: the model needs about", num_heads=TINY.num_heads)
    with pytest.raises(ConfigError, match="Ti/16: the model needs about .* GiB"):
        vitlab.create_model("Ti/16", depth=1_000_000)  # checked before anything is built


@pytest.mark.unit
@pytest.mark.fault("allocation", kinds=2)
def test_the_limit_is_a_keyword_and_a_flag(folder, tmp_path, capsys):
    refused(folder, "above the limit of 1.91e-06 GiB (memory_limit)", memory_limit=2048)
    assert vitlab.load(folder, memory_limit=2**30).config.depth == 1
    Image = pytest.importorskip("PIL.Image")
    Image.new("RGB", (16, 16), (9, 99, 199)).save(tmp_path / "x.png")
    line = one_line_error(
        capsys, ["predict", "--ckpt", str(folder), str(tmp_path / "x.png"), "--batch-size", "10000000"]
    )
    assert "inference on a batch of 10000000" in line and "of memory available" in line
    line = one_line_error(capsys, ["predict", "--ckpt", str(folder), str(tmp_path / "x.png"), "--memory-limit", "1e-6"])
    assert "(memory_limit)" in line
    assert main_status(["predict", "--ckpt", str(folder), str(tmp_path / "x.png"), "--memory-limit", "1"]) == 0


@pytest.mark.unit
@pytest.mark.fault("allocation", kinds=5)
def test_the_batches_a_dataloader_holds_count_against_the_limit(folder, tmp_path, capsys):
    config = vitlab.load(folder).config
    size = config.image_size
    assert batches_in_flight(10, size, 3, value_bytes=1) == 7 * 10 * 3 * size[0] * size[1]  # 2 ahead per worker
    # a limit between what predict needs with no workers and with 7: the workers' batches decide
    alone = memory_needed(config, 256) + batches_in_flight(256, size, 0, value_bytes=1)
    seven = memory_needed(config, 256) + batches_in_flight(256, size, 7, value_bytes=1)
    assert alone < seven
    Image = pytest.importorskip("PIL.Image")
    Image.new("RGB", (16, 16), (9, 99, 199)).save(tmp_path / "x.png")
    argv = ["predict", "--ckpt", str(folder), str(tmp_path / "x.png"), "--batch-size", "256"]
    limit = str((alone + seven) / 2 / 2**30)
    line = one_line_error(capsys, [*argv, "--workers", "7", "--memory-limit", limit])
    assert "of it the input images held at once" in line and "or hold fewer input images at once" in line
    assert main_status([*argv, "--workers", "0", "--memory-limit", limit]) == 0
    # analyze: its --images, all held at once (at most --max-images), or --data's DataLoader batches
    analysed = ["analyze", "--ckpt", str(folder), "--out", str(tmp_path / "analysis")]
    loads = str(1.01 * memory_needed(config, 1) / 2**30)  # the model loads; its analysis does not fit
    line = one_line_error(capsys, [*analysed, "--images", str(tmp_path / "x.png"), "--memory-limit", loads])
    assert "inference on a batch of 16" in line and "of it the input images held at once" in line
    line = one_line_error(capsys, [*analysed, "--data", "digits", "--batch-size", "10000000"])
    assert "inference on a batch of 10000000" in line and "of it the input images held at once" in line
    line = one_line_error(capsys, ["fewshot", "--ckpt", str(folder), "--data", "digits", "--batch-size", "10000000"])
    assert "inference on a batch of 10000000" in line and "of it the input images held at once" in line
    # training: the training loader's batches and the evaluation loader's
    train = ["train", "--data", "digits", "--steps", "1", "--out", str(tmp_path / "run"), "--batch-size", "512"]
    line = one_line_error(capsys, [*train, "--workers", "8", "--memory-limit", "2"])
    assert "training on a batch of 512" in line and "of it the input images held at once" in line


def main_status(argv: list[str]) -> int:
    from vitlab.cli import main

    return main(argv)


@pytest.mark.unit
@pytest.mark.fault("allocation", kinds=2)
def test_an_npz_that_unpacks_beyond_the_limit_is_refused_unread(tmp_path):
    bomb = tmp_path / "bomb.npz"
    np.savez_compressed(bomb, **{"embedding/kernel": np.zeros((2048, 2048, 4), np.float32)})  # 64 MiB of zeros
    assert bomb.stat().st_size < 1_000_000
    refused(bomb, "bomb.npz: its arrays unpack to 64 MiB, above the memory limit of 16 MiB", memory_limit=2**24)
    scanned = tmp_path / "scanned.npz"  # big_vision's stacked layers: depth from a zero-element array
    arrays = {
        key: np.zeros(shape, np.float32)
        for key, shape in [
            ("embedding/kernel", (4, 4, 3, 8)),
            ("embedding/bias", (8,)),
            ("cls", (1, 1, 8)),
            ("pos_embedding", (1, 5, 8)),
            ("Transformer/encoderblock/LayerNorm_0/scale", (10**8, 0)),
            ("Transformer/encoderblock/MultiHeadDotProductAttention_0/query/kernel", (0, 8, 2, 4)),
            ("Transformer/encoderblock/MlpBlock_0/Dense_0/kernel", (0, 8, 16)),
            ("Transformer/encoder_norm/scale", (8,)),
            ("Transformer/encoder_norm/bias", (8,)),
        ]
    }
    np.savez(scanned, **arrays)
    refused(scanned, "scanned.npz: the model needs about")


# -- text files: bounded in size, kind, nesting and expansion ----------------------------------------------
@pytest.mark.unit
@pytest.mark.fault("allocation", kinds=5)
def test_config_json_is_read_within_bounds(folder, tmp_path):
    cases = {
        "urandom": ("not a regular file", lambda p: os.symlink("/dev/urandom", p)),
        "fifo": ("not a regular file", lambda p: os.mkfifo(p)),
        "huge": ("above the limit of 16 MiB", lambda p: p.write_bytes(b" " * (16 * 2**20 + 1))),
        "deep": ("JSON nested too deeply", lambda p: p.write_text("[" * 100_000 + "]" * 100_000)),
        "folder": ("a folder, not a regular file", lambda p: p.mkdir()),
    }
    for name, (expected, make) in cases.items():
        (tmp_path / name).mkdir()
        make(tmp_path / name / "config.json")
        message = refused(tmp_path / name, expected)
        assert f"{name}/config.json: " in message, message


@pytest.mark.integration
@pytest.mark.fault("allocation", kinds=3)
def test_yaml_aliases_deep_nesting_and_folders_are_one_line(tmp_path, capsys):
    # 355 bytes that expand to 9^9 strings through aliases ("billion laughs").
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    (tmp_path / "deep.yaml").write_text("[" * 50_000 + "]" * 50_000)
    for name, expected in [
        ("bomb.yaml", "YAML aliases (*a) are not allowed"),
        ("deep.yaml", "nested too deeply"),
        ("", "a folder, not a regular file"),
    ]:
        line = one_line_error(capsys, ["train", "--out", str(tmp_path / "run"), "--config", str(tmp_path / name)])
        assert expected in line, line


# -- fields of the wrong type: one line naming the file and the field ----------------------------------------
BAD_FIELDS = {
    "patch-size-string": (architecture(patch_size="8"), "patch_size: expected an integer, got str '8'"),
    "dim-float": (architecture(dim=1e9), "dim: expected an integer, got 1000000000.0"),
    "norm-eps-word": (lambda d: d["numerics"].update(norm_eps="tiny"), "norm_eps: expected a number, got str 'tiny'"),
    "norm-eps-nan": (lambda d: d["numerics"].update(norm_eps=float("nan")), "norm_eps: expected a number, got nan"),
    "classes-fraction": (architecture(num_classes=10.5), "num_classes: expected an integer, got 10.5"),
    "names-string": (lambda d: d.update(class_names="abc"), "class_names: expected a list of strings or null"),
    "names-numbers": (lambda d: d.update(class_names=[1, 2, 3]), "class_names: expected a list of strings"),
    "names-count": (lambda d: d.update(class_names=["a", "b"]), "class_names lists 2 names for num_classes=3"),
    "preprocessing-list": (
        lambda d: d.update(preprocessing=[0.5, 0.5]),
        "'preprocessing' must be a JSON object, got list",
    ),
    "mean-string": (lambda d: d["preprocessing"].update(mean="abc"), "preprocessing.mean: expected a list of 3"),
    "preprocessing-key": (lambda d: d["preprocessing"].update(gamma=2.2), "preprocessing: unknown keys gamma"),
    "head-dim-negative": (architecture(head_dim=-4), "head_dim must be positive or null, got -4"),
    "head-dim-zero": (architecture(head_dim=0), "head_dim must be positive or null, got 0"),
    "qkv-bias-yes": (architecture(qkv_bias="yes"), "qkv_bias: expected true/false, got str 'yes'"),
    "antialias-int": (
        lambda d: d["numerics"].update(pos_resample_antialias=1),
        "pos_resample_antialias: expected true/false",
    ),
    "section-list": (lambda d: d.update(architecture=[1]), "'architecture' must be a JSON object, got list"),
    "name-list": (lambda d: d.update(name=["x"]), "name: expected a string"),
    "section-missing": (
        lambda d: d.pop("architecture"),
        f"format_version {FORMAT_VERSION} holds a 'architecture' object; it is missing",
    ),
}


@pytest.mark.unit
@pytest.mark.fault("bad-fields", kinds=len(BAD_FIELDS))
def test_every_bad_field_is_one_line_naming_config_json(folder, tmp_path):
    for name, (edit, expected) in BAD_FIELDS.items():
        message = refused(edited(folder, tmp_path / name, edit), expected, error=CheckpointError)
        assert message.startswith(str(tmp_path / name / "config.json") + ": "), message


@pytest.mark.unit
@pytest.mark.fault("bad-fields", kinds=4)
def test_bad_weight_files_name_the_file_and_the_real_problem(folder, tmp_path):
    corrupt = edited(folder, tmp_path / "corrupt", weights=lambda p: p.write_bytes(b"\x08" * 64))
    refused(corrupt, "corrupt/model.safetensors: not a readable safetensors file")
    nan = {k: torch.full_like(v, float("nan")) for k, v in create_untrained(TINY).state_dict().items()}
    refused(
        edited(folder, tmp_path / "nan", weights=lambda p: save_file(nan, str(p))),
        "non-finite weights (NaN or infinity) in 20 tensors: blocks.0.attn.proj.bias",
    )
    (tmp_path / "text.npz").write_text("not a zip at all")
    assert "pickled" not in refused(tmp_path / "text.npz", "text.npz: not a readable .npz (not a zip archive)")
    with zipfile.ZipFile(tmp_path / "empty.npz", "w"):
        pass
    refused(tmp_path / "empty.npz", "empty.npz: no embedding/kernel")


@pytest.mark.unit
@pytest.mark.fault("bad-fields", kinds=5)
def test_outputs_of_the_wrong_kind_or_read_only_are_one_line(folder, tmp_path, capsys, monkeypatch):
    (tmp_path / "file").write_text("x")
    line = one_line_error(capsys, ["train", "--data", "digits", "--steps", "1", "--out", str(tmp_path / "file")])
    assert "--out" in line and "is a file, not a folder" in line
    line = one_line_error(
        capsys, ["train", "--data", "digits", "--steps", "1", "--out", str(tmp_path / "file" / "run")]
    )
    assert "cannot write there" in line
    line = one_line_error(capsys, ["eval", "--ckpt", str(folder), "--data", "digits", "--out", str(tmp_path)])
    assert "is a folder, not a file" in line
    line = one_line_error(
        capsys, ["eval", "--ckpt", str(folder), "--data", "digits", "--out", str(tmp_path / "file" / "eval.json")]
    )
    assert "its folder" in line and "is a file, not a folder" in line

    # A read-only folder: the probe file fails as the kernel makes it fail (these tests may run as root,
    # for whom permission bits do not hold).
    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("vitlab.cli.tempfile.TemporaryFile", read_only)
    line = one_line_error(capsys, ["train", "--data", "digits", "--steps", "1", "--out", str(tmp_path / "ro")])
    assert "cannot write there (Permission denied)" in line


@pytest.mark.unit
@pytest.mark.fault("bad-fields", kinds=1)
def test_a_dataset_of_one_class_is_refused(tmp_path, capsys):
    from PIL import Image

    (tmp_path / "data" / "only").mkdir(parents=True)
    for index in range(4):
        Image.new("RGB", (8, 8), (index * 50, 10, 10)).save(tmp_path / "data" / "only" / f"{index}.png")
    line = one_line_error(
        capsys,
        [
            "train",
            "--data",
            str(tmp_path / "data"),
            "--model",
            "mu/4",
            "--image-size",
            "8",
            "--steps",
            "1",
            "--batch-size",
            "2",
            "--out",
            str(tmp_path / "run"),
        ],
    )
    assert "1 class (only); classification needs at least 2" in line
