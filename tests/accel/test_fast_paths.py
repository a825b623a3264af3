"""vitlab's fast paths (vitlab.accel) compute the plain model's numbers.

- attention written out as matmuls + softmax (CPU bf16), with the weights recomputed in backward;
- optimize_for_inference: a frozen, compiled copy in fp32 or bf16.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import vitlab
from helpers import randomise_
from vitlab.accel import accelerate, blocked, kernels
from vitlab.accel.blocked import INFERENCE_QUERY_BLOCK, QUERY_BLOCK, blocked_attention, cpu_softmax, images_per_block
from vitlab.accel.layers import matmul_attention_is_faster
from vitlab.model.attention import softmax_attention


def tiny_model(**overrides) -> vitlab.VisionTransformer:
    options = dict(image_size=32, num_classes=7, dim=64, depth=3, num_heads=2, mlp_dim=128)
    options.update(overrides)
    return randomise_(vitlab.create_model("Ti/8", **options), std=0.05).eval()


def reference(model: vitlab.VisionTransformer, images: torch.Tensor) -> torch.Tensor:
    """Every layer over every token, as the paper writes it."""
    with torch.no_grad():
        return model.forward_head(model.forward_features(images))


@pytest.mark.unit
def test_attention_in_query_blocks_equals_the_whole():
    tokens = QUERY_BLOCK + 37  # two blocks, the second partial
    q, k, v = torch.randn(3, 2, 4, tokens, 16, dtype=torch.float64).unbind(0)
    bias = torch.randn(4, tokens, tokens, dtype=torch.float64)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    torch.testing.assert_close(blocked_attention(q, k, v, 16**-0.5, bias), expected, rtol=0, atol=1e-12)


@pytest.mark.unit
def test_matmul_attention_is_chosen_where_kernels_chose_it(monkeypatch):
    for native_bf16, expected in ((True, True), (False, False)):
        monkeypatch.setattr(kernels, "onednn_supports", lambda dtype, native_bf16=native_bf16: native_bf16)
        monkeypatch.setattr(kernels, "_native", {})
        monkeypatch.setattr(kernels, "_attention", {torch.bfloat16: "matmul"})  # as if timed: the matmuls won
        assert matmul_attention_is_faster(torch.zeros(1, dtype=torch.bfloat16)) is expected
        assert not matmul_attention_is_faster(torch.zeros(1))


@pytest.mark.unit
def test_bf16_training_recomputes_attention_with_identical_gradients(monkeypatch):
    """Autocast training takes the matmul path under checkpoint; gradients equal the stored-weights path."""
    model = accelerate(tiny_model().train(), torch.bfloat16)
    images = torch.randn(2, 3, 32, 32)

    def gradients() -> dict[str, torch.Tensor]:
        model.zero_grad()
        with torch.autocast("cpu", torch.bfloat16):
            loss = model(images).float().square().sum()
        loss.backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    recomputed = gradients()
    # The same math with the attention weights kept for backward instead of recomputed.
    monkeypatch.setattr(vitlab.accel.layers, "checkpoint", lambda fn, *args, **kwargs: fn(*args))
    stored = gradients()
    for name in stored:
        torch.testing.assert_close(recomputed[name], stored[name], rtol=0, atol=0, msg=name)


@pytest.mark.unit
def test_bf16_output_is_as_close_to_fp32_as_autocast():
    model = tiny_model()
    images = torch.randn(4, 3, 32, 32)
    expected = reference(model, images)
    fast = vitlab.optimize_for_inference(model, dtype=torch.bfloat16, compile=False)(images)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        autocast = model(images).float()
    scale = expected.abs().max()
    assert fast.dtype == torch.float32
    assert (fast - expected).abs().max() < 0.03 * scale
    assert (fast - expected).abs().max() < 2 * (autocast - expected).abs().max() + 1e-3 * scale


@pytest.mark.unit
def test_optimize_for_inference_leaves_the_model_alone():
    model = tiny_model()
    before = copy.deepcopy(model.state_dict())
    fast = vitlab.optimize_for_inference(model, dtype=torch.bfloat16, compile=False)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    with torch.no_grad():
        model.head.weight.add_(1.0)  # later changes to the model do not reach the snapshot
    images = torch.randn(2, 3, 32, 32)
    model.load_state_dict(before)
    torch.testing.assert_close(fast(images), reference(model, images), rtol=0.05, atol=0.05)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_compiled_frozen_fast_path_matches_reference():
    model = tiny_model(depth=2)
    images = torch.randn(2, 3, 32, 32)
    expected = reference(model, images)
    fp32 = vitlab.optimize_for_inference(model, dtype=torch.float32)(images)
    torch.testing.assert_close(fp32, expected, rtol=0, atol=1e-5)
    bf16 = vitlab.optimize_for_inference(model, dtype=torch.bfloat16)(images)
    assert (bf16 - expected).abs().max() < 0.03 * expected.abs().max()


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("library", ["onednn", "mkl"])
def test_fp32_fast_path_runs_its_gemms_in_the_library_chosen_for_this_cpu(monkeypatch, library):
    """Where kernels.fp32_gemm chose oneDNN, the batch is dynamic and the frozen graph calls oneDNN's
    prepacked linear; where it chose MKL, MKL's; with the reference's numbers either way, and the
    caller's tensor left unmarked."""
    from torch._inductor.utils import run_and_get_code

    monkeypatch.setattr(kernels, "_gemm", {"fp32": library})
    torch._dynamo.reset()
    model = tiny_model(depth=2)
    fast = vitlab.optimize_for_inference(model, dtype=torch.float32)
    images = torch.randn(3, 3, 32, 32)
    logits, code = run_and_get_code(fast, images)
    torch.testing.assert_close(logits, reference(model, images), rtol=0, atol=1e-5)
    source = "\n".join(code)
    onednn, mkl = "mkldnn._linear_pointwise" in source, "mkl._mkl_linear" in source
    assert (onednn, mkl) == (library == "onednn", library == "mkl"), (onednn, mkl)
    assert fast.dynamic_batch == (library == "onednn") and not hasattr(images, "_dynamo_dynamic_indices")
    five = torch.randn(5, 3, 32, 32)
    torch.testing.assert_close(fast(five), reference(model, five), rtol=0, atol=1e-5)


@pytest.mark.integration
def test_fast_path_compiles_frozen_with_the_cpp_wrapper_on_cpu():
    """The options reach Inductor when it compiles: freezing (weights as constants) and, on CPU, the
    C++ wrapper; read by a stand-in backend, so nothing is compiled."""
    fast = vitlab.optimize_for_inference(tiny_model(depth=1), dtype=torch.bfloat16)
    seen = []

    def backend(graph: torch.fx.GraphModule, _inputs: list[torch.Tensor]):
        seen.append((torch._inductor.config.freezing, torch._inductor.config.cpp_wrapper))
        return graph.forward

    config = torch._inductor.config
    before = (config.freezing, config.cpp_wrapper)
    torch._dynamo.reset()
    fast.network = torch.compile(fast.model, backend=backend)
    fast(torch.randn(2, 3, 32, 32))
    assert seen == [(True, True)] and (config.freezing, config.cpp_wrapper) == before  # only while compiling


@pytest.mark.unit
def test_eager_bf16_cpu_softmax_is_fp32s_rounded_within_an_ulp_and_so_is_its_gradient():
    """On the CPU, eagerly, the bf16 softmax runs in ATen's kernel, fp32 inside, without an fp32 tensor:
    each weight within one bf16 ulp (2^-8 relative, at most) of the fp32 softmax, with autograd or
    without, and the gradient through it within a few bf16 roundings of the fp32 tensor's."""
    q, k, v = (torch.randn(2, 3, 40, 16).bfloat16() for _ in range(3))
    logits = (q * 0.25) @ k.transpose(-2, -1)
    exact = logits.float().softmax(dim=-1)
    with torch.no_grad():
        _, weights = softmax_attention(q, k, v, 0.25, softmax=cpu_softmax)
    trained_q, fp32_q = q.clone().requires_grad_(), q.clone().requires_grad_()
    out, trained = softmax_attention(trained_q, k, v, 0.25, softmax=cpu_softmax)
    assert weights.dtype == trained.dtype == torch.bfloat16
    for computed in (weights, trained.detach()):
        assert ((computed.float() - exact).abs() <= 2**-8 * exact).all()
    fp32_weights = ((fp32_q * 0.25) @ k.transpose(-2, -1)).softmax(dim=-1, dtype=torch.float32).bfloat16()
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    ((fp32_weights @ v) * upstream).sum().backward()
    scale = fp32_q.grad.abs().max().item()
    torch.testing.assert_close(trained_q.grad, fp32_q.grad, rtol=0, atol=2**-6 * scale)
    assert not torch.equal(trained_q.grad, torch.zeros_like(trained_q.grad))


@pytest.mark.integration
@pytest.mark.parametrize("bias_shape", ["heads", "images"])
def test_eager_bf16_inference_attention_computes_what_training_does(monkeypatch, bias_shape):
    """Outside autograd, blocked_attention's bf16 route (inference_attention: the scale in the GEMM, the
    softmax in place, heads written out merged, blocks of images and of queries) gives the autograd
    route's numbers within bf16 rounding, with a bias per head or per image (relative attention's)."""
    monkeypatch.setattr(blocked, "images_per_block", lambda *shape: 2)  # blocks of 2, 2 and 1 images
    torch.manual_seed(0)
    tokens = INFERENCE_QUERY_BLOCK + 37  # two blocks, the second partial
    qkv = torch.randn(5, tokens, 3, 3, 16).bfloat16()  # as Attention lays out its qkv projection
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    bias = torch.randn(*(3, tokens, tokens) if bias_shape == "heads" else (5, 3, tokens, tokens)).bfloat16()
    exact = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=bias.float())
    with torch.no_grad():
        fast = blocked_attention(q, k, v, 0.25, bias)
    trained = blocked_attention(q.requires_grad_(), k, v, 0.25, bias).detach()
    assert fast.dtype == trained.dtype == torch.bfloat16 and fast.shape == trained.shape
    assert fast.transpose(1, 2).is_contiguous()  # Attention merges the heads with a view
    torch.testing.assert_close(fast.float(), exact, rtol=2**-6, atol=2e-2)
    torch.testing.assert_close(fast, trained, rtol=2**-7, atol=2**-9)


@pytest.mark.unit
def test_inference_attention_blocks_hold_the_logits_the_l2_caches_hold(monkeypatch):
    monkeypatch.setattr(blocked, "l2_cache_bytes", lambda: 2**20)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert images_per_block(6, 197, 197, 2) == 4  # S/16: 466 kB of bf16 logits per image in 2 MiB
    assert images_per_block(12, 197, 197, 2) == 2  # B/16
    assert images_per_block(16, 200, 577, 4) == 1  # larger than the caches: still one image
