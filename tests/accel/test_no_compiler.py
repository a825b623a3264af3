"""The speed layer's C code is never needed: where vitlab's bf16 kernel could run but no C compiler
is on PATH, accelerate says why ATen's kernel runs instead, starts no process, and the accelerated
model computes the plain model's numbers."""

from __future__ import annotations

import copy
import logging

import pytest
import torch

import vitlab
from helpers import bare_machine, randomise_, side_effects
from vitlab.accel import accelerate, kernels, layers, native, softmax


@pytest.fixture
def avx512_bf16_without_a_compiler(monkeypatch, tmp_path):
    """A CPU on which vitlab's kernel would be built (faked: x86-64, AVX512 ATen kernels, AVX512_BF16,
    torch's threads in libgomp), a read-only cache folder and no compiler on PATH."""
    cache = bare_machine(monkeypatch, tmp_path)
    monkeypatch.setattr(native.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(kernels, "cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    monkeypatch.setattr(native, "openmp_library", lambda: "/usr/lib/x86_64-linux-gnu/libgomp.so.1")
    monkeypatch.setattr(layers, "native", lambda dtype: True)  # so that accelerate asks for the kernel
    monkeypatch.setattr(native, "_library", [])
    monkeypatch.setattr(softmax, "_chosen", [])
    yield
    cache.chmod(0o700)


@pytest.mark.unit
def test_without_a_compiler_accelerate_keeps_atens_kernel_and_the_numbers(avx512_bf16_without_a_compiler, caplog):
    model = randomise_(vitlab.create_model("Ti/8", image_size=32, num_classes=5)).eval()
    plain = copy.deepcopy(model)
    images = torch.randn(2, 3, 32, 32)
    with side_effects() as found, caplog.at_level(logging.INFO, logger="vitlab"):
        accelerate(model, torch.bfloat16)
        with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
            fast = model(images).float()
    assert found == [], found
    said = [r.getMessage() for r in caplog.records if "softmax" in r.getMessage()]
    assert said == ["bf16 softmax: ATen's kernel (no C compiler: set CC)"], said
    assert not softmax.chosen() and native.library() is None
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        expected = plain(images).float()
    assert expected.abs().max() > 0.1
    torch.testing.assert_close(fast, expected, rtol=2e-2, atol=2e-2 * expected.abs().max().item())
