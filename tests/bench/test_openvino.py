"""OpenVINO as a peer: its rows in fp32 and bf16 at a batch and at batch 1, its settings as it reports
them, its own targets, never the best peer; runtimes interleaved with a pause that lets the last one's
threads settle."""

from __future__ import annotations

import time

import pytest
import torch

import vitlab
from helpers import randomise_
from vitlab.bench import BenchConfig, Case, CaseSpec, markdown, run_bench
from vitlab.bench.openvino import emulation_note
from vitlab.bench.report import with_document_keys
from vitlab.bench.targets import LATENCY_BATCH, OPENVINO_TARGETS
from vitlab.bench.timing import interleaved
from vitlab.model import VisionTransformer

CPU = torch.device("cpu")


@pytest.mark.unit
def test_a_row_says_where_openvino_computes_in_another_precision_than_asked():
    reported = {"requested_precision": "bf16", "INFERENCE_PRECISION_HINT": "f32"}
    assert emulation_note(reported) == "bf16 computed in f32: no native bf16 on this CPU"
    assert emulation_note({**reported, "INFERENCE_PRECISION_HINT": "bf16"}) is None
    assert emulation_note(None) is None


@pytest.mark.unit
def test_interleaved_samples_are_apart_by_the_settling_pause_which_is_not_timed():
    starts: list[float] = []

    def step() -> None:
        starts.append(time.perf_counter())

    seconds = interleaved({"a": step, "b": step}, rounds=2, device=CPU, settle_s=0.03)
    gaps = [later - earlier for earlier, later in zip(starts, starts[1:], strict=False)]
    assert len(starts) == 4 and min(gaps) >= 0.03, gaps
    assert max(max(values) for values in seconds.values()) < 0.03  # the pause is outside the timed call


@pytest.mark.integration
def test_openvino_computes_the_models_logits():
    openvino = pytest.importorskip("openvino")
    from vitlab.bench.openvino import OpenVinoModel

    config = vitlab.config_for("mu/8", image_size=32, num_classes=5)
    model = randomise_(VisionTransformer(config)).eval()
    images = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    runtime = OpenVinoModel(model, config)
    runtime.compile("fp32", tuple(images.shape), torch.get_num_threads())
    with torch.no_grad():
        expected = model(images)
    torch.testing.assert_close(runtime(images), expected, rtol=1e-4, atol=1e-4)
    settings = runtime.runtime_config
    assert settings is not None and settings["openvino"] == openvino.get_version()
    assert (settings["PERFORMANCE_HINT"], settings["NUM_STREAMS"]) == ("LATENCY", "1")
    assert settings["INFERENCE_NUM_THREADS"] == str(torch.get_num_threads())
    assert settings["INFERENCE_PRECISION_HINT"] == settings["requested_precision"] == "f32"


@pytest.mark.integration
def test_openvino_runs_beside_vitlab_in_fp32_and_bf16_at_a_batch_and_at_batch_1_held_to_its_own_targets():
    pytest.importorskip("openvino")
    implementations = ("vitlab", "timm", "openvino")
    config = BenchConfig(
        cases=[
            CaseSpec(Case("mu/8", 32, batch, dtype, "infer"), implementations, ("eager",))
            for batch in (2, LATENCY_BATCH)
            for dtype in ("fp32", "bf16")
        ],
        rounds=2,
        warmup=1,
        min_sample_s=0.01,
        gemm_sizes=(256,),
        memory=False,
    )
    results = run_bench(config)
    for case in results["cases"]:
        rows = {row["implementation"]: row for row in case["rows"]}
        assert list(rows) == list(implementations), case
        assert case["best_peer"] == "timm"  # OpenVINO has targets of its own
        settings = rows["openvino"]["runtime_config"]
        assert settings["requested_precision"] == {"fp32": "f32", "bf16": "bf16"}[case["dtype"]]
        assert set(settings) >= {"INFERENCE_PRECISION_HINT", "PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS"}
        assert rows["openvino"]["latency_ms"]["median"] > 0
    text = markdown(with_document_keys(results, "tiny"))
    for target in OPENVINO_TARGETS["tiny"]:
        assert f"| {target.label} |" in text and f"| {target.label} | - |" not in text
    bf16 = next(case for case in results["cases"] if case["dtype"] == "bf16")
    note = emulation_note(next(r for r in bf16["rows"] if r["implementation"] == "openvino")["runtime_config"])
    assert note is None or f"| openvino | eager ({note}) |" in text
