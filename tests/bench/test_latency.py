"""Batch-1 latency: every call timed on its own, the median and 90th percentile reported per row, and
the targets reading the case of their own batch."""

from __future__ import annotations

import pytest
import torch

from vitlab.bench import BenchConfig, Case, CaseSpec, run_bench
from vitlab.bench.report import latency_lines
from vitlab.bench.targets import LATENCY_BATCH, Side, Target
from vitlab.bench.timing import each_call, latency_ms

CPU = torch.device("cpu")


@pytest.mark.unit
def test_latency_is_the_median_and_90th_percentile_of_single_calls():
    assert latency_ms([value / 1e3 for value in range(10, 0, -1)]) == {"median": 5.5, "p90": 9.1}
    assert latency_ms([0.002]) == {"median": 2.0, "p90": 2.0}
    assert latency_ms([]) is None
    into: list[float] = []
    each_call(lambda: None, 3, CPU, into)()
    assert len(into) == 3 and all(value >= 0 for value in into)


def case(batch: int, vitlab: float, timm: float, latency: dict | None = None) -> dict:
    def row(name: str, speed: float) -> dict:
        return {
            "implementation": name,
            "mode": "eager",
            "images_per_s": speed,
            "modes": {"eager": speed},
            "latency_ms": (latency or {}).get(name),
        }

    rows = [row("vitlab", vitlab), row("timm", timm)]
    return {"variant": "S/16", "image_size": 224, "task": "infer", "dtype": "bf16", "batch": batch, "rows": rows}


@pytest.mark.unit
def test_a_target_reads_the_case_of_its_batch_and_otherwise_never_the_latency_case():
    cases = [case(LATENCY_BATCH, 10.0, 20.0), case(16, 60.0, 40.0)]  # the batch-1 case first
    throughput = Target("S/16", 224, Side("infer", "bf16", "vitlab"), Side("infer", "bf16", "timm"), 1.15)
    latency = Target("S/16", 224, Side("infer", "bf16", "vitlab"), Side("infer", "bf16", "timm"), 1.0, LATENCY_BATCH)
    assert throughput.ratio(cases) == pytest.approx(1.5)
    assert latency.ratio(cases) == pytest.approx(0.5)
    assert latency.label.startswith("S/16 @224 batch 1: ")
    assert Target("S/16", 224, latency.numerator, latency.denominator, 1.0, 4).ratio(cases) is None


@pytest.mark.unit
def test_the_latency_table_has_a_row_per_implementation_of_each_batch_1_case():
    ms = {"vitlab": {"median": 20.0, "p90": 22.5}, "timm": {"median": 25.0, "p90": 31.0}}
    text = "\n".join(latency_lines([case(16, 60.0, 40.0, ms), case(LATENCY_BATCH, 50.0, 40.0, ms)]))
    assert "| S/16 @224 | bf16 | vitlab | eager | 20.00 | 22.50 | 1.00x |" in text
    assert "| S/16 @224 | bf16 | timm | eager | 25.00 | 31.00 | 1.25x |" in text
    assert text.count("| S/16 @224 |") == 2  # the batch-16 case has no latency rows
    assert latency_lines([case(16, 60.0, 40.0, ms)]) == []


@pytest.mark.integration
def test_a_batch_1_run_reports_each_rows_latency_from_every_timed_call():
    config = BenchConfig(
        cases=[CaseSpec(Case("mu/8", 32, LATENCY_BATCH, "fp32", "infer"), ("vitlab", "timm"), ("eager",))],
        rounds=3,
        warmup=1,
        min_sample_s=0.01,
        gemm_sizes=(256,),
        memory=False,
    )
    (result,) = run_bench(config)["cases"]
    for row in result["rows"]:
        latency = row["latency_ms"]
        assert 0 < latency["median"] <= latency["p90"], row
        contender = next(c for c in result["contenders"] if c["implementation"] == row["implementation"])
        assert contender["latency_ms"] == latency
