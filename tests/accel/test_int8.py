"""int8 inference (accel/int8.py, optimize_for_inference with dtype torch.int8): the encoder's linears in
oneDNN's int8 kernels, within quantization error of the float model, the rest in the dtype this CPU
runs natively, and a clear error where int8 cannot run."""

from __future__ import annotations

import logging
import os

import pytest
import torch
from torch import nn

import vitlab
from helpers import randomise_
from vitlab.accel import cpu, int8, kernels
from vitlab.accel.int8 import Int8Linear, quantize_linears
from vitlab.errors import ConfigError


def tiny_model(**overrides) -> vitlab.VisionTransformer:
    options = dict(image_size=32, num_classes=7, dim=64, depth=3, num_heads=2, mlp_dim=128)
    options.update(overrides)
    return randomise_(vitlab.create_model("Ti/8", **options), std=0.05).eval()


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual - expected).abs().max() / expected.abs().max()).item()


@pytest.mark.unit
@pytest.mark.parametrize("gelu", [None, "none", "tanh"])
def test_int8_linear_is_the_float_linear_within_quantization_error(gelu):
    linear = nn.Linear(96, 48)
    activation = nn.GELU(approximate=gelu) if gelu else nn.Identity()
    x = torch.randn(4, 9, 96)
    with torch.no_grad():
        expected = activation(linear(x))
        int8 = Int8Linear(linear, gelu=activation if gelu else None)
        actual = int8(x)
    assert int8.weight.dtype == torch.int8 and actual.shape == expected.shape and actual.dtype == torch.float32
    error = relative_error(actual, expected)
    assert 0 < error < 0.02, error  # quantized (not the float GEMM), and close: 8 bits a side
    with torch.no_grad():
        assert relative_error(int8(x.bfloat16()).float(), expected) < 0.03  # bf16 in, bf16 out


@pytest.mark.unit
def test_int8_linear_keeps_a_constant_input_exact_at_zero():
    linear = nn.Linear(32, 16)
    with torch.no_grad():
        out = Int8Linear(linear)(torch.zeros(3, 32))
        torch.testing.assert_close(out, linear.bias.expand(3, 16), rtol=0, atol=1e-6)  # zero is a level


@pytest.mark.unit
def test_quantize_linears_replaces_every_encoder_linear_and_folds_gelu():
    model = quantize_linears(tiny_model())
    for block in model.blocks:
        assert all(isinstance(m, Int8Linear) for m in (block.attn.qkv, block.attn.proj, block.mlp.fc1, block.mlp.fc2))
        assert block.mlp.fc1.post_op == "gelu" and isinstance(block.mlp.act, nn.Identity)
    assert not isinstance(model.head, Int8Linear)  # the head stays in float


@pytest.mark.unit
@pytest.mark.parametrize("act", ["gelu", "silu"])
def test_a_gated_mlp_keeps_its_activation_on_the_gate(act):
    """fc1 of a gated MLP gives gate and value; an activation fused into fc1 would act on both."""
    model = tiny_model(gated_mlp=True, act=act)
    images = torch.randn(6, 3, 32, 32)
    with torch.no_grad():
        expected = model(images)
        fast = vitlab.optimize_for_inference(model, dtype=torch.int8, compile=False)
        logits = fast(images)
        tokens = torch.randn(6, 17, 64)
        mlp_error = relative_error(fast.model.blocks[0].mlp(tokens.to(fast.dtype)).float(), model.blocks[0].mlp(tokens))
    for block in fast.model.blocks:
        assert block.mlp.fc1.post_op == "none" and not isinstance(block.mlp.act, nn.Identity)
    assert 0 < mlp_error < 0.05, mlp_error  # the MLP alone: the residual stream would hide a wrong gate
    assert 0 < relative_error(logits, expected) < 0.05


@pytest.mark.unit
@pytest.mark.parametrize("native_bf16", [True, False])
def test_int8_inference_is_the_models_logits_within_quantization_error(monkeypatch, caplog, native_bf16):
    monkeypatch.setattr(kernels, "_native", {torch.bfloat16: native_bf16})
    model = tiny_model()
    images = torch.randn(6, 3, 32, 32)
    with torch.no_grad():
        expected = model(images)
    with caplog.at_level(logging.INFO, logger="vitlab"):
        fast = vitlab.optimize_for_inference(model, dtype=torch.int8, compile=False)
    companion = "bf16" if native_bf16 else "fp32"
    assert fast.dtype == (torch.bfloat16 if native_bf16 else torch.float32)
    assert f"the encoder's linears in int8 (oneDNN), the rest in {companion}" in caplog.text
    assert (
        fast.model.head.weight.dtype == fast.dtype and fast.model.blocks[0].mlp.fc1.weight_scale.dtype == torch.float32
    )
    logits = fast(images)
    assert logits.dtype == torch.float32
    assert 0 < relative_error(logits, expected) < 0.05
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the model itself is left alone


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_compiled_int8_path_computes_the_eager_int8_numbers():
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    model = tiny_model(depth=2)
    images = torch.randn(3, 3, 32, 32)
    eager = vitlab.optimize_for_inference(model, dtype=torch.int8, compile=False)(images)
    compiled = vitlab.optimize_for_inference(model, dtype=torch.int8)
    logits, code = run_and_get_code(compiled, images)
    assert "qlinear_pointwise" in "\n".join(code)  # oneDNN's int8 GEMM, its weight prepacked at compile time
    torch.testing.assert_close(logits, eager, rtol=0, atol=0.02 * eager.abs().max().item())


@pytest.mark.unit
def test_int8_asks_for_a_vit_on_the_cpu():
    with pytest.raises(ConfigError, match="int8 inference runs on the CPU"):
        vitlab.optimize_for_inference(tiny_model().to("meta"), dtype=torch.int8, compile=False)
    with pytest.raises(ConfigError, match="int8: BiTResNet has no encoder blocks"):
        vitlab.optimize_for_inference(vitlab.create_model("BiT-R50x1", num_classes=3), dtype=torch.int8)


def cpu_flags() -> set[str]:
    return set(cpu.cpuinfo_fields().get("flags", "").split())


@pytest.mark.unit
def test_the_saturation_probe_answers_as_this_cpus_int8_instructions_say():
    """oneDNN sums u8 x s8 products in pairs into int16 (saturating) without VNNI or AMX-INT8."""
    flags = cpu_flags()
    if not flags or "ONEDNN_MAX_CPU_ISA" in os.environ:
        pytest.skip("the CPU's flags are not reported, or oneDNN's ISA is capped")
    int32_sums = bool(flags & {"avx512_vnni", "avx_vnni", "amx_int8"})
    assert int8.pairs_saturate() is not int32_sums


@pytest.mark.unit
@pytest.mark.parametrize("saturates", [True, False])
def test_activations_take_7_bits_where_the_int8_gemm_saturates(monkeypatch, caplog, saturates):
    monkeypatch.setattr(int8, "_levels", [])
    monkeypatch.setattr(int8, "pairs_saturate", lambda: saturates)
    linear = nn.Linear(8, 4)
    with caplog.at_level(logging.INFO, logger="vitlab"):
        layers = [Int8Linear(linear), Int8Linear(linear)]
    levels = 127 if saturates else 255
    assert [layer.levels for layer in layers] == [levels, levels]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and f"activations in {levels} levels" in said[0], said  # asked once
    x = torch.randn(3, 8)
    quantized, scale, zero_point = layers[0].quantize(x)
    assert quantized.max() == levels and quantized.min() == 0  # the range spans the levels, no more
    torch.testing.assert_close((quantized.float() - zero_point) * scale, x, rtol=0, atol=scale.item() / 2 + 1e-6)
