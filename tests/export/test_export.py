"""Export: ONNX checked by onnxruntime, torch.export programs, the official npz, the runtime interface."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import onnx
import pytest
import torch
from PIL import Image

import vitlab
from helpers import randomise_
from vitlab.cli import main
from vitlab.export import (
    ExportMismatchError,
    OnnxModel,
    TracePlan,
    compare,
    export_model,
    export_onnx,
    export_program,
    open_model,
    read_program_config,
)
from vitlab.model import Preprocessing

SMALL = dict(patch_size=8, dim=32, depth=2, num_heads=4, mlp_dim=64, num_classes=5)
NAMES = ["apple", "pear", "plum", "fig", "kiwi"]
PREPROCESSING = Preprocessing(mean=(0.4, 0.5, 0.6), std=(0.2, 0.25, 0.3), crop_pct=0.9, interpolation="bilinear")


def small_model(image_size: int = 32, **options) -> vitlab.VisionTransformer:
    model = vitlab.create_model(
        vitlab.ViTConfig(image_size=image_size, **{**SMALL, **options}, class_names=NAMES, preprocessing=PREPROCESSING)
    )
    return randomise_(model).eval()


def inputs(batch: int, size: int, seed: int = 7) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


# -- the bar: Ti/S widths, class token and GAP, two image sizes ------------------------------
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("image_size", [32, 64])
@pytest.mark.parametrize("pool", ["token", "gap"])
@pytest.mark.parametrize("variant", ["Ti/16", "S/16"])
def test_onnx_round_trip_matches_pytorch_within_1e4(tmp_path, variant, pool, image_size):
    model = randomise_(vitlab.create_model(variant, image_size=image_size, num_classes=10, pool=pool)).eval()
    check = export_onnx(model, tmp_path / "model.onnx")
    assert check.max_abs_diff <= 1e-4 and check.batch_sizes == (1, 3)

    runtime = OnnxModel(tmp_path / "model.onnx")  # fresh inputs, a batch size the check did not use
    images = inputs(4, image_size)
    with torch.no_grad():
        expected = model(images)
    got = runtime(images)
    assert got.shape == (4, 10)
    assert (got - expected).abs().max().item() <= 1e-4
    assert expected.abs().max().item() > 0.5  # logits of a useful scale, not near zero
    assert runtime.config == model.config


# -- ONNX details ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """A folder with one small model as a vitlab checkpoint (ckpt/) and as ONNX (m.onnx); one export
    serves every test that only reads it (each takes a few seconds)."""
    folder = tmp_path_factory.mktemp("exported")
    torch.manual_seed(0)
    model = small_model()
    vitlab.save_pretrained(model, folder / "ckpt")
    export_onnx(model, folder / "m.onnx")
    return folder


@pytest.mark.integration
def test_onnx_metadata_carries_class_names_and_preprocessing(exported):
    props = {p.key: p.value for p in onnx.load(str(exported / "m.onnx")).metadata_props}
    assert json.loads(props["class_names"]) == NAMES
    assert json.loads(props["preprocessing"]) == {
        "mean": [0.4, 0.5, 0.6],
        "std": [0.2, 0.25, 0.3],
        "crop_pct": 0.9,
        "interpolation": "bilinear",
        "crop_mode": "center",
    }
    assert json.loads(props["image_size"]) == [32, 32] and props["num_classes"] == "5"
    config = OnnxModel(exported / "m.onnx").config
    assert config == vitlab.load(exported / "ckpt").config  # the whole config travels with the file


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_onnx_batch_axis_is_dynamic_or_fixed_as_asked(tmp_path):
    model = small_model(pool="gap", pos_embed="sincos")
    dims = {}
    for name, dynamic in (("dynamic", True), ("fixed", False)):
        export_onnx(model, tmp_path / f"{name}.onnx", TracePlan(dynamic_batch=dynamic, batch_size=2))
        shape = onnx.load(str(tmp_path / f"{name}.onnx")).graph.input[0].type.tensor_type.shape
        dims[name] = shape.dim[0]
    assert dims["dynamic"].dim_param and not dims["dynamic"].dim_value
    assert dims["fixed"].dim_value == 2
    assert OnnxModel(tmp_path / "dynamic.onnx")(inputs(5, 32)).shape == (5, 5)
    with pytest.raises(Exception, match="(?i)dimension|shape"):
        OnnxModel(tmp_path / "fixed.onnx")(inputs(5, 32))


@pytest.mark.unit
def test_compare_fails_above_tolerance_and_on_nan():
    model = small_model()
    with torch.no_grad():
        check = compare(model, lambda x: model(x) + 5e-5, 3, (32, 32), (1, 2), "shifted")
    assert math.isclose(check.max_abs_diff, 5e-5, rel_tol=0.05)
    with pytest.raises(
        ExportMismatchError, match=r"shifted: exported model disagrees with PyTorch: max \|logit difference\| 0.001"
    ):
        compare(model, lambda x: model(x) + 1e-3, 3, (32, 32), (1,), "shifted")
    with pytest.raises(ExportMismatchError, match="nan"):
        compare(model, lambda x: model(x) * float("nan"), 3, (32, 32), (1,), "broken")
    with pytest.raises(ExportMismatchError, match=r"output shape \(1, 4\)"):
        compare(model, lambda x: model(x)[:, :4], 3, (32, 32), (1,), "cut")


# -- torch.export and npz ----------------------------------------------------------------------------
@pytest.mark.integration
def test_torch_export_program_round_trip_with_metadata(tmp_path):
    model = small_model(pool="gap", image_size=(32, 16))
    check = export_program(model, tmp_path / "m.pt2")
    assert check.max_abs_diff <= 1e-5
    program = torch.export.load(tmp_path / "m.pt2").module()
    images = torch.randn(4, 3, 32, 16)
    with torch.no_grad():
        assert torch.allclose(program(images), model(images), atol=1e-5)
    assert read_program_config(tmp_path / "m.pt2") == model.config


@pytest.mark.unit
def test_npz_export_reloads_to_the_same_logits(tmp_path):
    model = small_model(act="gelu_tanh", gap_norm="before_pool", pool="gap")
    path, check = export_model(model, "npz", tmp_path / "official")
    assert path.name == "official.npz" and check.max_abs_diff <= 1e-5
    reloaded = vitlab.load(path)
    with torch.no_grad():
        assert torch.allclose(reloaded(inputs(2, 32)), model(inputs(2, 32)), atol=1e-5)


@pytest.mark.unit
def test_runtimes_give_the_same_logits(exported):
    torch_model = open_model(exported / "ckpt", "torch")
    onnx_model = open_model(exported / "m.onnx", "onnx")
    assert isinstance(onnx_model, OnnxModel) and onnx_model.config == torch_model.config
    images = inputs(3, 32)
    with torch.no_grad():
        assert (torch_model(images) - onnx_model(images)).abs().max().item() <= 1e-4
    with pytest.raises(ValueError, match="unknown runtime 'tflite'"):
        open_model(exported / "m.onnx", "tflite")


@pytest.mark.unit
def test_predict_command_gives_the_same_output_with_onnxruntime(exported, tmp_path, capsys):
    pictures = []
    for index, colour in enumerate([(200, 30, 30), (30, 200, 30), (240, 240, 240)]):
        image = Image.new("RGB", (40, 36), colour)
        image.paste((20, 20, 20), (5 * index, 4, 5 * index + 12, 20))
        image.save(tmp_path / f"{index}.png")
        pictures.append(str(tmp_path / f"{index}.png"))
    outputs = {}
    for runtime, ckpt in (("torch", exported / "ckpt"), ("onnx", exported / "m.onnx")):
        assert main(["predict", "--ckpt", str(ckpt), *pictures, "--json", "--runtime", runtime, "--device", "cpu"]) == 0
        outputs[runtime] = json.loads(capsys.readouterr().out)
    for torch_row, onnx_row in zip(outputs["torch"], outputs["onnx"], strict=True):
        assert [t["label"] for t in torch_row["top"]] == [t["label"] for t in onnx_row["top"]]
        assert [t["prob"] for t in torch_row["top"]] == pytest.approx([t["prob"] for t in onnx_row["top"]], abs=1e-5)
    assert {t["label"] for row in outputs["onnx"] for t in row["top"]} <= set(NAMES)


@pytest.mark.unit
def test_onnx_runtime_refuses_foreign_files(tmp_path):
    (tmp_path / "junk.onnx").write_bytes(b"not a protobuf")
    with pytest.raises(ValueError, match="junk.onnx: not a readable ONNX model"):
        OnnxModel(tmp_path / "junk.onnx")
    plain = onnx.helper.make_model(
        onnx.helper.make_graph(
            [onnx.helper.make_node("Identity", ["images"], ["logits"])],
            "g",
            [onnx.helper.make_tensor_value_info("images", onnx.TensorProto.FLOAT, [1, 3])],
            [onnx.helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [1, 3])],
        )
    )
    onnx.save(plain, str(tmp_path / "plain.onnx"))
    with pytest.raises(ValueError, match="plain.onnx: not exported by vitlab .its metadata has no vitlab_config"):
        OnnxModel(tmp_path / "plain.onnx")
    with pytest.raises(FileNotFoundError):
        OnnxModel(tmp_path / "missing.onnx")


# -- a zero head (fresh fine-tuning model) gives all-zero logits: the check must still be able to fail --
def fresh_model(**options) -> vitlab.VisionTransformer:
    """As created: random encoder, zero-initialised head (paper Sec. 3.2), so every logit is 0."""
    model = vitlab.create_model(vitlab.ViTConfig(image_size=32, **{**SMALL, **options}, class_names=NAMES)).eval()
    assert not model.head.weight.any()
    return model


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_zero_head_export_is_checked_on_a_copy_with_a_random_head(tmp_path, capsys):
    vitlab.save_pretrained(fresh_model(), tmp_path / "ckpt")
    target = str(tmp_path / "m.pt2")
    assert main(["export", "--ckpt", str(tmp_path / "ckpt"), "--format", "export", "--out", target]) == 0
    out = capsys.readouterr().out
    difference, scale = re.search(r"max \|logit difference\| (\S+) .*, logits up to (\S+) \(", out).groups()
    assert float(difference) <= 1e-4 and float(scale) > 0.5, out  # compared on logits that vary with the input
    assert "the head is zero" in out and "a copy with a random head" in out
    written = torch.export.load(tmp_path / "m.pt2").module()
    assert not written(inputs(2, 32)).any()  # the file itself is the model as it is, zero head and all


@pytest.mark.integration
@pytest.mark.fault("export", kinds=1)
def test_zero_head_export_that_changed_the_encoder_fails(tmp_path, monkeypatch):
    import vitlab.export

    def load_with_a_changed_encoder(path, **overrides):
        model = vitlab.load(path, **overrides)
        with torch.no_grad():
            model.norm.weight.mul_(1.01)  # what a faulty writer or reader might do
        return model

    monkeypatch.setattr(vitlab.export, "load", load_with_a_changed_encoder)
    with pytest.raises(ExportMismatchError, match="disagrees with PyTorch"):
        export_model(fresh_model(act="gelu_tanh"), "npz", tmp_path / "official")
    monkeypatch.undo()
    _, check = export_model(small_model(act="gelu_tanh"), "npz", tmp_path / "random")  # a non-zero head
    assert check.note == "" and check.max_abs_logit > 0.5  # its own logits are informative: no copy needed


# -- the command -------------------------------------------------------------------------------------
@pytest.mark.integration
def test_export_command_onnx_at_another_image_size(tmp_path, capsys):
    vitlab.save_pretrained(small_model(), tmp_path / "ckpt")
    code = main(
        [
            "export",
            "--ckpt",
            str(tmp_path / "ckpt"),
            "--format",
            "onnx",
            "--out",
            str(tmp_path / "m.onnx"),
            "--image-size",
            "48",
            "--dynamic-batch",
            "--speed",
            "2",
            "--threads",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"wrote {tmp_path / 'm.onnx'} (onnx, input 48x48); max |logit difference|" in out
    assert "on batch sizes 1, 3" in out
    speed = re.search(r"batch 2, 1 thread\(s\) each, .*: PyTorch ([\d.]+) ms, onnxruntime ([\d.]+) ms", out)
    assert speed and float(speed[1]) > 0 and float(speed[2]) > 0
    assert OnnxModel(tmp_path / "m.onnx").config.image_size == (48, 48)


@pytest.mark.unit
@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--format", "onnx", "--ckpt", "{tmp}/nowhere"], "nowhere: no such file or folder"),
        (["--format", "npz", "--ckpt", "{tmp}/ckpt"], "cannot hold gap_norm='after_pool'"),
        (
            ["--format", "onnx", "--ckpt", "{tmp}/ckpt", "--no-dynamic-batch", "--batch-size", "0"],
            "--batch-size must be at least 1",
        ),
        (["--format", "export", "--ckpt", "{tmp}/ckpt", "--speed", "4"], "--speed BATCH needs --format onnx"),
        (["--format", "onnx", "--ckpt", "{tmp}/ckpt", "--tolerance", "-1"], "--tolerance must be at least 0, got -1"),
        (["--format", "onnx", "--ckpt", "{tmp}/ckpt", "--tolerance", "nan"], "--tolerance must be at least 0, got nan"),
    ],
)
def test_export_command_errors_are_one_line(tmp_path, capsys, arguments, message):
    vitlab.save_pretrained(small_model(pool="gap", gap_norm="after_pool"), tmp_path / "ckpt")
    arguments = [a.replace("{tmp}", str(tmp_path)) for a in arguments]
    assert main(["export", "--out", str(tmp_path / "out"), *arguments]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
