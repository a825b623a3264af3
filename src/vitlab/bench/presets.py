"""Named sets of cases: `standard` is what `make bench` runs and docs/benchmarks.md reports.

Compiling takes most of a run (5-45 s per contender on 2 cores), so `standard` tries the modes that
can win: bf16 inference compiles with bf16 weights only (with autocast it was never faster, see
docs/benchmarks.md), training pits vitlab against timm, and B/16, where everyone is GEMM-bound, is
measured for inference only (`vitlab bench B/16:train:bf16:8:vitlab,timm` adds training: 2 more
minutes). Batch 1, what serving one image costs, is measured for S/16 (fp32 and bf16) and B/16 (bf16):
every implementation's latency, median and 90th percentile. `full` tries every mode of every implementation. `res384` is the paper's fine-tuning
resolution, `int8` vitlab's and onnxruntime's int8 models against vitlab's fast path. targets.TARGETS holds what each
preset's ratios must reach, targets.OPENVINO_TARGETS what vitlab must reach against OpenVINO (targets.py; docs/benchmarks.md says met / not met from the run's own numbers).
"""

from __future__ import annotations

import torch

from vitlab.accel.kernels import native

from .harness import CaseSpec
from .implementations import IMPLEMENTATIONS, OPENVINO, OTHER_NUMERICS, RUNTIMES
from .steps import Case
from .targets import LATENCY_BATCH

INFER_FP32 = ("eager", "compile", "fast")
INFER_BF16 = ("eager", "eager+bf16w", "compile+bf16w", "fast")
TRAIN = ("eager", "compile")
VERSUS_TIMM = ("vitlab", "timm")
# bf16 inference with the weights cast: in the standard run every peer's best bf16 mode was a +bf16w
# one (autocast over fp32 weights was 1-5% slower for each), so the long cases skip autocast.
INFER_BF16_WEIGHTS = ("eager+bf16w", "compile+bf16w", "fast")
INT8 = ("vitlab", "vitlab-int8", "onnxruntime", "onnxruntime-int8")


# Every implementation computing the case's own numbers: the int8 ones (OTHER_NUMERICS) have their preset,
# `int8`, which keeps this one shorter.
SAME_NUMERICS = tuple(name for name in IMPLEMENTATIONS if name not in OTHER_NUMERICS)


def standard() -> list[CaseSpec]:
    specs = []
    for variant, batch in (("Ti/16", 32), ("S/16", 16)):
        specs += [
            CaseSpec(Case(variant, 224, batch, "fp32", "infer"), SAME_NUMERICS, INFER_FP32),
            CaseSpec(Case(variant, 224, batch, "bf16", "infer"), modes=INFER_BF16),
            CaseSpec(Case(variant, 224, batch, "bf16", "train"), VERSUS_TIMM, TRAIN),
        ]
    specs.append(CaseSpec(Case("B/16", 224, 8, "bf16", "infer"), (*VERSUS_TIMM, OPENVINO), INFER_BF16))
    return specs + latency()


def latency() -> list[CaseSpec]:
    """Batch 1 inference, every implementation computing the case's numbers: S/16 in fp32 and bf16,
    B/16 in bf16."""
    return [
        CaseSpec(Case("S/16", 224, LATENCY_BATCH, "fp32", "infer"), SAME_NUMERICS, INFER_FP32),
        CaseSpec(Case("S/16", 224, LATENCY_BATCH, "bf16", "infer"), SAME_NUMERICS, INFER_BF16_WEIGHTS),
        CaseSpec(Case("B/16", 224, LATENCY_BATCH, "bf16", "infer"), SAME_NUMERICS, INFER_BF16_WEIGHTS),
    ]


def full() -> list[CaseSpec]:
    """Every implementation in every mode, fp32 and bf16, Ti/16 to B/16: several times `standard`."""
    return [
        CaseSpec(Case(variant, 224, batch, dtype, task))
        for variant, batch in (("Ti/16", 32), ("S/16", 16), ("B/16", 8))
        for task in ("infer", "train")
        for dtype in ("fp32", "bf16")
    ]


def res384() -> list[CaseSpec]:
    """The paper's fine-tuning resolution (Sec. 3.2 / Appendix B.1.1: 384 px, 577 tokens for /16) in bf16:
    inference against every peer, the training step against timm."""
    specs = []
    for variant, batch in (("S/16", 8), ("B/16", 4)):
        specs += [
            CaseSpec(Case(variant, 384, batch, "bf16", "infer"), modes=INFER_BF16_WEIGHTS),
            CaseSpec(Case(variant, 384, batch, "bf16", "train"), VERSUS_TIMM, TRAIN),
        ]
    return specs


def int8() -> list[CaseSpec]:
    """vitlab's int8 path and onnxruntime's int8 beside onnxruntime fp32 and vitlab's fast path, fp32 and
    bf16, at 224."""
    specs = []
    for variant, batch in (("Ti/16", 32), ("S/16", 16)):
        specs += [
            CaseSpec(Case(variant, 224, batch, "fp32", "infer"), INT8, ("eager", "fast")),
            CaseSpec(Case(variant, 224, batch, "bf16", "infer"), ("vitlab",), ("fast",)),
        ]
    return specs


def tiny() -> list[CaseSpec]:
    """Seconds, not minutes: a smoke test of the harness, with the int8 rows of `int8` and a batch-1
    latency case."""
    return [
        CaseSpec(
            Case("mu/8", 32, 2, "fp32", "infer"),
            ("vitlab", "vitlab-int8", "timm", "onnxruntime-int8", "openvino"),
            ("eager", "fast"),
        ),
        CaseSpec(Case("mu/8", 32, 2, "bf16", "infer"), ("vitlab",), ("fast",)),
        CaseSpec(Case("mu/8", 32, 2, "bf16", "train"), VERSUS_TIMM, ("eager",)),
        CaseSpec(
            Case("mu/8", 32, LATENCY_BATCH, "fp32", "infer"),
            ("vitlab", "timm", "onnxruntime", "openvino"),
            ("eager", "fast"),
        ),
    ]


def avx2() -> list[CaseSpec]:
    """standard's Ti/16 and S/16 cases for a CPU without native bf16 (`make bench-avx2` emulates one),
    at batch 8: there every peer's bf16 GEMMs run ATen's fallback and a bf16 step takes seconds.
    onnxruntime and OpenVINO are left out: their own kernels do not honour the emulation's variables. vitlab-int8 runs
    in the fp32 cases (oneDNN's int8 kernels limited to AVX2, the rest in fp32), shown, not held to the
    int8 preset's targets."""
    peers = tuple(name for name in IMPLEMENTATIONS if name not in (*RUNTIMES, *OTHER_NUMERICS))
    specs = []
    for variant in ("Ti/16", "S/16"):
        specs += [
            CaseSpec(Case(variant, 224, 8, "fp32", "infer"), (*peers, "vitlab-int8"), INFER_FP32),
            CaseSpec(Case(variant, 224, 8, "bf16", "infer"), peers, ("eager+bf16w", "compile+bf16w", "fast")),
            CaseSpec(Case(variant, 224, 8, "bf16", "train"), VERSUS_TIMM, TRAIN),
        ]
    return specs


def misfit(preset: str) -> str | None:
    """Why `preset` does not measure what it is for on this CPU, or None: the avx2 preset on a CPU
    with native bf16 measures that CPU, not one without (its tables say which it ran on)."""
    if preset == "avx2" and native(torch.bfloat16):
        return (
            "--preset avx2 is for a CPU without native bf16, and this one has it: its cases run on this CPU "
            "as it is (`make bench-avx2` limits it to AVX2)"
        )
    return None


PRESETS = {"standard": standard, "full": full, "tiny": tiny, "avx2": avx2, "res384": res384, "int8": int8}
INT8_ACCURACY_PRESETS = ("int8", "tiny")  # their runs also score int8 on the digits model (int8_accuracy.py)
