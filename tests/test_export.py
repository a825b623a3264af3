"""Export: ONNX checked by onnxruntime, torch.export programs, the official npz, the runtime interface."""

from __future__ import annotations

import json
import math
from pathlib import Path

import onnx
import pytest
import torch

import vitlab
from conftest import randomise_
from vitlab.cli import main
from vitlab.export import (
    ExportMismatchError,
    OnnxClassifier,
    TorchClassifier,
    compare,
    export_model,
    export_onnx,
    export_program,
    open_classifier,
    read_program_info,
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
@pytest.mark.parametrize("image_size", [32, 64])
@pytest.mark.parametrize("pool", ["token", "gap"])
@pytest.mark.parametrize("variant", ["Ti/16", "S/16"])
def test_onnx_round_trip_matches_pytorch_within_1e4(tmp_path, variant, pool, image_size):
    model = randomise_(vitlab.create_model(variant, image_size=image_size, num_classes=10, pool=pool), std=0.05).eval()
    check = export_onnx(model, tmp_path / "model.onnx")
    assert check.max_abs_diff <= 1e-4 and check.batch_sizes == (1, 3)

    runtime = OnnxClassifier(tmp_path / "model.onnx")  # fresh inputs, a batch size the check did not use
    images = inputs(4, image_size)
    with torch.no_grad():
        expected = model(images)
    got = runtime.logits(images)
    assert got.shape == (4, 10)
    assert (got - expected).abs().max().item() <= 1e-4
    assert expected.abs().max().item() > 0.1  # the logits are not trivially zero
    assert runtime.info.image_size == (image_size, image_size)


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


def test_onnx_metadata_carries_class_names_and_preprocessing(exported):
    props = {p.key: p.value for p in onnx.load(str(exported / "m.onnx")).metadata_props}
    assert json.loads(props["class_names"]) == NAMES
    assert json.loads(props["preprocessing"]) == {
        "mean": [0.4, 0.5, 0.6], "std": [0.2, 0.25, 0.3], "crop_pct": 0.9, "interpolation": "bilinear",
    }
    assert json.loads(props["image_size"]) == [32, 32] and props["num_classes"] == "5"
    info = OnnxClassifier(exported / "m.onnx").info
    assert info.class_names == NAMES and info.preprocessing == PREPROCESSING and info.label(2) == "plum"


@pytest.mark.slow
def test_onnx_batch_axis_is_dynamic_or_fixed_as_asked(tmp_path):
    model = small_model(pool="gap", pos_embed="sincos")
    dims = {}
    for name, dynamic in (("dynamic", True), ("fixed", False)):
        export_onnx(model, tmp_path / f"{name}.onnx", dynamic_batch=dynamic, batch_size=2)
        shape = onnx.load(str(tmp_path / f"{name}.onnx")).graph.input[0].type.tensor_type.shape
        dims[name] = shape.dim[0]
    assert dims["dynamic"].dim_param and not dims["dynamic"].dim_value
    assert dims["fixed"].dim_value == 2
    assert OnnxClassifier(tmp_path / "dynamic.onnx").logits(inputs(5, 32)).shape == (5, 5)
    with pytest.raises(Exception, match="(?i)dimension|shape"):
        OnnxClassifier(tmp_path / "fixed.onnx").logits(inputs(5, 32))


def test_compare_fails_above_tolerance_and_on_nan():
    model = small_model()
    with torch.no_grad():
        check = compare(model, lambda x: model(x) + 5e-5, 3, (32, 32), (1, 2), "shifted")
    assert math.isclose(check.max_abs_diff, 5e-5, rel_tol=0.05)
    with pytest.raises(ExportMismatchError, match=r"shifted: exported model disagrees with PyTorch: max \|logit difference\| 0.001"):
        compare(model, lambda x: model(x) + 1e-3, 3, (32, 32), (1,), "shifted")
    with pytest.raises(ExportMismatchError, match="nan"):
        compare(model, lambda x: model(x) * float("nan"), 3, (32, 32), (1,), "broken")
    with pytest.raises(ExportMismatchError, match=r"output shape \(1, 4\)"):
        compare(model, lambda x: model(x)[:, :4], 3, (32, 32), (1,), "cut")


# -- torch.export and npz ----------------------------------------------------------------------------
def test_torch_export_program_round_trip_with_metadata(tmp_path):
    model = small_model(pool="gap", image_size=(32, 16))
    check = export_program(model, tmp_path / "m.pt2")
    assert check.max_abs_diff <= 1e-5
    program = torch.export.load(tmp_path / "m.pt2").module()
    images = torch.randn(4, 3, 32, 16)
    with torch.no_grad():
        assert torch.allclose(program(images), model(images), atol=1e-5)
    info = read_program_info(tmp_path / "m.pt2")
    assert info.image_size == (32, 16) and info.class_names == NAMES and info.preprocessing == PREPROCESSING


def test_npz_export_reloads_to_the_same_logits(tmp_path):
    model = small_model(act="gelu_tanh", gap_norm="before_pool", pool="gap")
    path, check = export_model(model, "npz", tmp_path / "official")
    assert path.name == "official.npz" and check.max_abs_diff <= 1e-5
    reloaded = vitlab.load(path)
    with torch.no_grad():
        assert torch.allclose(reloaded(inputs(2, 32)), model(inputs(2, 32)), atol=1e-5)


def test_runtimes_give_the_same_logits(exported):
    torch_runtime = open_classifier(exported / "ckpt", "torch")
    onnx_runtime = open_classifier(exported / "m.onnx", "onnx")
    assert isinstance(torch_runtime, TorchClassifier) and isinstance(onnx_runtime, OnnxClassifier)
    assert torch_runtime.info == onnx_runtime.info
    images = inputs(3, 32)
    assert (torch_runtime.logits(images) - onnx_runtime.logits(images)).abs().max().item() <= 1e-4
    with pytest.raises(ValueError, match="unknown runtime 'tflite'"):
        open_classifier(exported / "m.onnx", "tflite")


def test_onnx_runtime_refuses_foreign_files(tmp_path):
    (tmp_path / "junk.onnx").write_bytes(b"not a protobuf")
    with pytest.raises(ValueError, match="junk.onnx: not a readable ONNX model"):
        OnnxClassifier(tmp_path / "junk.onnx")
    plain = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["images"], ["logits"])], "g",
        [onnx.helper.make_tensor_value_info("images", onnx.TensorProto.FLOAT, [1, 3])],
        [onnx.helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [1, 3])],
    ))
    onnx.save(plain, str(tmp_path / "plain.onnx"))
    with pytest.raises(ValueError, match="plain.onnx: not exported by vitlab .metadata lacks model_name"):
        OnnxClassifier(tmp_path / "plain.onnx")
    with pytest.raises(FileNotFoundError):
        OnnxClassifier(tmp_path / "missing.onnx")


# -- the command -------------------------------------------------------------------------------------
def test_export_command_onnx_at_another_image_size(tmp_path, capsys):
    vitlab.save_pretrained(small_model(), tmp_path / "ckpt")
    code = main(["export", "--ckpt", str(tmp_path / "ckpt"), "--format", "onnx", "--out", str(tmp_path / "m.onnx"),
                 "--image-size", "48", "--dynamic-batch"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"wrote {tmp_path / 'm.onnx'} (onnx, input 48x48); max |logit difference|" in out
    assert "on batch sizes 1, 3" in out
    assert OnnxClassifier(tmp_path / "m.onnx").info.image_size == (48, 48)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--format", "onnx", "--ckpt", "{tmp}/nowhere"], "nowhere: no such file or folder"),
        (["--format", "npz", "--ckpt", "{tmp}/ckpt"], "cannot hold gap_norm='after_pool'"),
        (["--format", "onnx", "--ckpt", "{tmp}/ckpt", "--no-dynamic-batch", "--batch-size", "0"], "--batch-size must be at least 1"),
    ],
)
def test_export_command_errors_are_one_line(tmp_path, capsys, arguments, message):
    vitlab.save_pretrained(small_model(pool="gap"), tmp_path / "ckpt")
    arguments = [a.replace("{tmp}", str(tmp_path)) for a in arguments]
    assert main(["export", "--out", str(tmp_path / "out"), *arguments]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
