"""The plain PyTorch path is the floor: every measured choice of the speed layer, fed a fake timing
table, takes a replacement only where it was timed faster than the plain path."""

from __future__ import annotations

import random

import pytest
import torch

from vitlab.accel import kernels, native, softmax
from vitlab.accel.blocked import blocked_attention

pytestmark = pytest.mark.unit

CPU = torch.device("cpu")
# (plain seconds, replacement seconds): slower, tied, a hair slower or faster, failed (inf), faster
EDGES = [(1.0, 2.0), (1.0, 1.0), (1.0, 1.0 + 1e-12), (1.0, 1.0 - 1e-12), (1.0, float("inf")), (2.0, 1.0)]
RANDOM = [(r.uniform(1e-4, 1.0), r.uniform(1e-4, 1.0)) for r in [random.Random(0)] for _ in range(40)]


def attention() -> str:
    kernels._attention.clear()
    return kernels.attention_path(torch.bfloat16, CPU, blocked_attention)


def fp32_gemm() -> str:
    kernels._gemm.clear()
    return kernels.fp32_gemm()


def softmax_kernel() -> str:
    return "vitlab" if native.measured_choice("softmax", lambda: None, softmax.timing) else "aten"


# each choice: how to make it, the name its timing gives the plain path, the replacement's
CHOICES = {
    "attention": (attention, "fused", "matmul"),
    "fp32 gemm": (fp32_gemm, "mkl", "onednn"),
    "bf16 softmax": (softmax_kernel, "aten", "vitlab"),
}


@pytest.fixture
def faked(monkeypatch, tmp_path):
    """A CPU with native bf16 whose timings (kernels.fastest, every choice's one source) come from
    the table the test fills in; a fresh cache folder per call, so that nothing is read back."""
    monkeypatch.setattr(kernels, "cpu_capability", lambda: "AMX")
    monkeypatch.setattr(kernels, "onednn_supports", lambda dtype: True)
    monkeypatch.setattr(kernels, "_native", {})
    monkeypatch.setattr(kernels, "_attention", {})
    monkeypatch.setattr(kernels, "_gemm", {})
    monkeypatch.setattr(torch._C, "has_mkl", True)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    table: dict[str, float] = {}
    monkeypatch.setattr(kernels, "fastest", lambda runs, repeats: {name: table[name] for name in runs})
    folders = iter(range(10**6))

    def choose(make, plain: str, replacement: str, seconds: tuple[float, float]) -> str:
        monkeypatch.setenv(kernels.CACHE_ENV, str(tmp_path / str(next(folders))))
        table.clear()
        table.update({plain: seconds[0], replacement: seconds[1]})
        return make()

    return choose


@pytest.mark.parametrize("what", CHOICES)
def test_no_replacement_slower_than_the_plain_path_is_ever_chosen(faked, what):
    make, plain, replacement = CHOICES[what]
    for seconds in EDGES + RANDOM:
        chosen = faked(make, plain, replacement, seconds)
        timed = dict(zip((plain, replacement), seconds, strict=True))
        assert timed[chosen] <= timed[plain], f"{what}: {chosen} chosen at {timed}"
        assert chosen == (replacement if timed[replacement] < timed[plain] else plain), f"{what}: {timed}"
