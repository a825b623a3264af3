"""Named sets of cases: `standard` is what `make bench` runs and docs/benchmarks.md reports."""

from __future__ import annotations

from .harness import CaseSpec
from .steps import Case


def standard() -> list[CaseSpec]:
    """Ti/16 and S/16 against every peer; B/16, where all run near the GEMM peak, against timm."""
    specs = []
    for variant, batch in (("Ti/16", 32), ("S/16", 16)):
        specs += [
            CaseSpec(Case(variant, 224, batch, "fp32", "infer")),
            CaseSpec(Case(variant, 224, batch, "bf16", "infer")),
            CaseSpec(Case(variant, 224, batch, "bf16", "train")),
        ]
    for task in ("infer", "train"):
        specs.append(CaseSpec(Case("B/16", 224, 8, "bf16", task), ("vitlab", "timm")))
    return specs


def tiny() -> list[CaseSpec]:
    """Seconds, not minutes: a smoke test of the harness."""
    return [
        CaseSpec(Case("mu/8", 32, 2, "fp32", "infer")),
        CaseSpec(Case("mu/8", 32, 2, "bf16", "train")),
    ]


PRESETS = {"standard": standard, "tiny": tiny}
