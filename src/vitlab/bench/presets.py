"""Named sets of cases: `standard` is what `make bench` runs and docs/benchmarks.md reports.

Compiling takes most of a run (5-45 s per contender on 2 cores), so `standard` tries the modes that
can win: bf16 inference compiles with bf16 weights only (with autocast it was never faster, see
docs/benchmarks.md), training pits vitlab against timm, and B/16, where everyone is GEMM-bound, is
measured for inference only (`vitlab bench B/16:train:bf16:8:vitlab,timm` adds training: 2 more
minutes). `full` tries every mode of every implementation.
"""

from __future__ import annotations

from .harness import CaseSpec
from .implementations import IMPLEMENTATIONS, ONNXRUNTIME
from .steps import Case

INFER_FP32 = ("eager", "compile", "fast")
INFER_BF16 = ("eager", "eager+bf16w", "compile+bf16w", "fast")
TRAIN = ("eager", "compile")
VERSUS_TIMM = ("vitlab", "timm")


def standard() -> list[CaseSpec]:
    specs = []
    for variant, batch in (("Ti/16", 32), ("S/16", 16)):
        specs += [
            CaseSpec(Case(variant, 224, batch, "fp32", "infer"), modes=INFER_FP32),
            CaseSpec(Case(variant, 224, batch, "bf16", "infer"), modes=INFER_BF16),
            CaseSpec(Case(variant, 224, batch, "bf16", "train"), VERSUS_TIMM, TRAIN),
        ]
    specs.append(CaseSpec(Case("B/16", 224, 8, "bf16", "infer"), VERSUS_TIMM, INFER_BF16))
    return specs


def full() -> list[CaseSpec]:
    """Every implementation in every mode, fp32 and bf16, Ti/16 to B/16: several times `standard`."""
    return [
        CaseSpec(Case(variant, 224, batch, dtype, task))
        for variant, batch in (("Ti/16", 32), ("S/16", 16), ("B/16", 8))
        for task in ("infer", "train")
        for dtype in ("fp32", "bf16")
    ]


def tiny() -> list[CaseSpec]:
    """Seconds, not minutes: a smoke test of the harness."""
    return [
        CaseSpec(Case("mu/8", 32, 2, "fp32", "infer"), modes=("eager", "fast")),
        CaseSpec(Case("mu/8", 32, 2, "bf16", "train"), VERSUS_TIMM, ("eager",)),
    ]


def avx2() -> list[CaseSpec]:
    """standard's Ti/16 and S/16 cases for a CPU without native bf16 (`make bench-avx2` emulates one),
    at batch 8: there every peer's bf16 GEMMs run ATen's fallback, a step takes seconds. onnxruntime is
    left out: its own kernels do not honour the emulation's variables."""
    peers = tuple(name for name in IMPLEMENTATIONS if name not in ONNXRUNTIME)
    specs = []
    for variant in ("Ti/16", "S/16"):
        specs += [
            CaseSpec(Case(variant, 224, 8, "fp32", "infer"), peers, INFER_FP32),
            CaseSpec(Case(variant, 224, 8, "bf16", "infer"), peers, ("eager+bf16w", "compile+bf16w", "fast")),
            CaseSpec(Case(variant, 224, 8, "bf16", "train"), VERSUS_TIMM, TRAIN),
        ]
    return specs


PRESETS = {"standard": standard, "full": full, "tiny": tiny, "avx2": avx2}
