"""Eq. 1's patch embedding with vitlab's CPU paths (accel.layers.FastPatchEmbedding): the GEMM of
eager CPU inference, and of Inductor's bf16 inference graphs, computes the convolution's numbers."""

from __future__ import annotations

import pytest
import torch

from vitlab.accel import accelerate, kernels
from vitlab.model.patch_embed import PatchEmbedding

pytestmark = pytest.mark.unit


def fast_embedding(*args) -> PatchEmbedding:
    """A PatchEmbedding(*args) as accelerate swaps it in."""
    return accelerate(torch.nn.ModuleList([PatchEmbedding(*args)]))[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eager_inference_patch_gemm_computes_the_convolution(monkeypatch, dtype):
    """Where the linears run through oneDNN, so does the patch embedding (one GEMM, no convolution), with
    the convolution's numbers and grid on a non-square image."""
    monkeypatch.setattr(kernels, "_gemm", {"fp32": "onednn"})
    torch.manual_seed(0)
    embed = fast_embedding(8, 3, 40).to(dtype)
    images = torch.randn(2, 3, 24, 40).to(dtype)
    with torch.no_grad():
        convolved = embed.proj(images).flatten(2).transpose(1, 2)
        if not kernels.eager_onednn(images, embed.proj.weight):  # bf16 on a CPU without native bf16
            pytest.skip("this CPU runs no oneDNN bf16 GEMMs")
    conv_calls = []
    monkeypatch.setattr(embed.proj, "forward", lambda x: conv_calls.append(1) or pytest.fail("convolution ran"))
    with torch.no_grad():
        tokens, grid = embed(images)
    assert conv_calls == [] and grid == (3, 5) and tokens.shape == (2, 15, 40) and tokens.dtype == dtype
    tolerance = {"rtol": 0, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2**-7, "atol": 2**-7}
    torch.testing.assert_close(tokens, convolved, **tolerance)
    assert tokens.abs().max() > 0.5


def test_training_keeps_the_convolution(monkeypatch):
    monkeypatch.setattr(kernels, "_gemm", {"fp32": "onednn"})
    embed = fast_embedding(4, 3, 8)
    tokens, grid = embed(torch.randn(1, 3, 8, 12))
    tokens.sum().backward()
    assert grid == (2, 3) and embed.proj.weight.grad is not None


def traced_calls(module: torch.nn.Module, images: torch.Tensor) -> tuple[torch.Tensor, set[str]]:
    """module(images) under torch.compile, and the names of the functions its traced graph calls."""
    called: set[str] = set()

    def record(graph: torch.fx.GraphModule, _inputs: list[torch.Tensor]):
        called.update(getattr(node.target, "__name__", str(node.target)) for node in graph.graph.nodes)
        return graph.forward

    torch._dynamo.reset()
    tokens, _ = torch.compile(module, backend=record, fullgraph=True)(images)
    return tokens, called


@pytest.mark.parametrize("grad", [False, True])
def test_compiled_bf16_inference_is_given_the_patch_gemm(monkeypatch, grad):
    """Inductor traces bf16 CPU inference (optimize_for_inference) as one linear, not a convolution,
    with the convolution's numbers; with autograd on, the convolution stays."""
    monkeypatch.setattr("vitlab.accel.layers.native", lambda dtype: True)  # on any CPU
    torch.manual_seed(0)
    embed = fast_embedding(8, 3, 40).bfloat16()
    images = torch.randn(2, 3, 24, 40).bfloat16()
    with torch.no_grad():
        convolved = embed.proj(images).flatten(2).transpose(1, 2)
    with torch.set_grad_enabled(grad):
        tokens, called = traced_calls(embed, images)
    assert ("linear" in called, "conv2d" in called) == ((False, True) if grad else (True, False))
    torch.testing.assert_close(tokens.detach(), convolved, rtol=2**-7, atol=2**-7)
    assert tokens.abs().max() > 0.5


def test_compiled_fp32_inference_keeps_the_convolution():
    embed = fast_embedding(4, 3, 8)
    with torch.no_grad():
        _, called = traced_calls(embed, torch.randn(1, 3, 8, 12))
    assert "conv2d" in called and "linear" not in called
