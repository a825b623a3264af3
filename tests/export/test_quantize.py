"""int8 ONNX: onnxruntime's dynamic quantization of the linear layers, checked against PyTorch and scored on digits."""

from __future__ import annotations

import collections
import json
from typing import Any

import onnx
import pytest
import torch

import vitlab
from helpers import randomise_
from vitlab.bench.int8_accuracy import digits_tensors, train_on_digits
from vitlab.bench.report import INT8_POINTS_LOST
from vitlab.cli import main
from vitlab.export import INT8_TOLERANCE, OnnxModel, export_model, export_quantized, quantize_onnx

SMALL: dict[str, Any] = dict(patch_size=8, dim=32, depth=2, num_heads=4, mlp_dim=64, num_classes=5)


def op_counts(path) -> collections.Counter:
    return collections.Counter(node.op_type for node in onnx.load(path).graph.node)


@pytest.mark.integration
def test_export_quantize_int8_writes_matmulinteger_graph_within_tolerance(tmp_path, capsys):
    model = vitlab.VisionTransformer(vitlab.ViTConfig(image_size=(32, 32), **SMALL, class_names=list("abcde")))
    randomise_(model)
    vitlab.save_pretrained(model, tmp_path / "ckpt")
    code = main(
        [
            "export",
            "--ckpt",
            str(tmp_path / "ckpt"),
            "--format",
            "onnx",
            "--out",
            str(tmp_path / "m.onnx"),
            "--quantize",
            "int8",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    int8 = tmp_path / "m.int8.onnx"
    assert f"wrote {int8} (onnx int8, input 32x32)" in out and "top-1 agreement" in out
    onnx.checker.check_model(onnx.load(int8))
    fp32_ops, int8_ops = op_counts(tmp_path / "m.onnx"), op_counts(int8)
    # Every weight MatMul (qkv, proj, fc1, fc2 per block) becomes MatMulInteger; attention's two activation
    # products per block, the head's Gemm and the patch Conv stay float.
    assert int8_ops["MatMulInteger"] == 4 * 2 == int8_ops["DynamicQuantizeLinear"]
    # The quantizer rewrites the head's Gemm as MatMul + Add, left float.
    assert int8_ops["MatMul"] == 2 * 2 + 1 and fp32_ops["Gemm"] == 1 and fp32_ops["MatMulInteger"] == 0
    assert int8_ops["Conv"] == 1
    assert int8.stat().st_size < (tmp_path / "m.onnx").stat().st_size  # int8 weights (the graph dominates here)
    runtime = OnnxModel(int8)  # the metadata the fp32 file records, so vitlab runs it as a model
    assert runtime.config.class_names == list("abcde") and runtime.config.image_size == (32, 32)

    images = torch.randn(16, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected, got = model.eval()(images), runtime(images)
    difference, scale = (got - expected).abs().max().item(), expected.abs().max().item()
    assert scale > 0.5 and 1e-4 < difference <= INT8_TOLERANCE * scale  # quantized, yet close
    assert (got.argmax(1) == expected.argmax(1)).float().mean() >= 0.85


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_zero_head_is_checked_on_a_random_head(tmp_path):
    model = vitlab.create_model(vitlab.ViTConfig(image_size=(32, 32), **SMALL)).eval()  # a fresh zero head
    path, _ = export_model(model, "onnx", tmp_path / "z.onnx")
    written, check = export_quantized(model, path)
    assert written == tmp_path / "z.int8.onnx" and written.is_file()
    assert "random head" in check.note and check.max_abs_logit > 0.5 and check.max_abs_diff > 0


@pytest.mark.unit
@pytest.mark.fault("export", kinds=3)
def test_bad_quantize_values_are_one_line(tmp_path, capsys):
    model = vitlab.VisionTransformer(vitlab.ViTConfig(image_size=(32, 32), **SMALL))
    randomise_(model)
    vitlab.save_pretrained(model, tmp_path / "ckpt")
    base = ["export", "--ckpt", str(tmp_path / "ckpt"), "--out", str(tmp_path / "m")]
    with pytest.raises(SystemExit) as exit_info:
        main([*base, "--format", "onnx", "--quantize", "int4"])
    error = [line for line in capsys.readouterr().err.splitlines() if not line.startswith(("usage:", " "))]
    assert exit_info.value.code == 2 and error == [
        "vitlab export: error: argument --quantize: invalid choice: 'int4' (choose from 'int8')"
    ]
    assert main([*base, "--format", "export", "--quantize", "int8"]) == 2
    err = capsys.readouterr().err
    assert "--quantize int8 needs --format onnx, got --format export" in err and err.count("\n") == 1
    with pytest.raises(ValueError, match="unknown quantization 'int4'; choose one of int8"):
        quantize_onnx(model, tmp_path / "missing.onnx", "int4")


@pytest.mark.integration
def test_int8_accuracy_cost_on_trained_digits_model(tmp_path, capsys):
    model = train_on_digits()
    fp32, _ = export_model(model, "onnx", tmp_path / "digits.onnx")
    int8, _ = export_quantized(model, fp32)
    report = tmp_path / "int8.json"
    code = main(["eval", "--ckpt", str(int8), "--runtime", "onnx", "--data", "digits", "--out", str(report)])
    assert code == 0, capsys.readouterr()
    result = json.loads(report.read_text())
    assert result["runtime"] == "onnx" and result["metrics"]["count"] == 360

    images, labels = digits_tensors(model.config, "val")
    runtime = OnnxModel(int8)
    with torch.no_grad():  # in eval's batches of 64: an activation's int8 scale is taken over its whole batch
        before = model(images).argmax(1)
        after = torch.cat([runtime(batch) for batch in images.split(64)]).argmax(1)
    top1_fp32, top1_int8 = (before == labels).float().mean().item(), (after == labels).float().mean().item()
    agree = (before == after).float().mean().item()
    print(f"digits val top-1: PyTorch fp32 {top1_fp32:.4f}, int8 {top1_int8:.4f}; same class for {100 * agree:.1f}%")
    assert result["metrics"]["top1"] == pytest.approx(top1_int8)  # the command scores what the file predicts
    assert top1_fp32 > 0.6  # trained: chance is 0.1
    assert 100 * (top1_fp32 - top1_int8) <= INT8_POINTS_LOST  # int8's accuracy bound on this model
    assert agree >= 0.97
