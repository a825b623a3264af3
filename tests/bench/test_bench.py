"""The side-by-side benchmark harness, on tiny cases that take seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import vitlab
from helpers import randomise_
from vitlab.bench import BenchConfig, Case, CaseSpec, Mode, markdown, run_bench, write
from vitlab.bench.flops import model_flops
from vitlab.bench.gpu import main as gpu_main
from vitlab.bench.gpu import spec_peak
from vitlab.bench.implementations import IMPLEMENTATIONS, ONNXRUNTIME, OTHER_NUMERICS, RUNTIMES, build
from vitlab.bench.machine import gemm_peak
from vitlab.bench.memory import step_peak_bytes
from vitlab.bench.report import machine_line
from vitlab.bench.timing import interleaved
from vitlab.cli import main as cli_main

CPU = torch.device("cpu")
# onnxruntime, OpenVINO: runtimes of their own; vitlab-int8: the fp32 case's fast mode only
TORCH_IMPLEMENTATIONS = [name for name in IMPLEMENTATIONS if name not in (*RUNTIMES, *OTHER_NUMERICS)]


@pytest.fixture(scope="module")
def tiny_results():
    config = BenchConfig(
        cases=[
            CaseSpec(Case("mu/8", 32, 2, "bf16", "infer"), tuple(TORCH_IMPLEMENTATIONS), ("eager", "eager+bf16w")),
            CaseSpec(Case("mu/8", 32, 2, "fp32", "train"), ("vitlab", "timm"), modes=("eager",)),
        ],
        rounds=3,
        warmup=1,
        min_sample_s=0.01,
        gemm_sizes=(512,),  # large enough that one product is not timer noise on a busy machine
    )
    return run_bench(config)


@pytest.mark.integration
def test_every_peer_builds_the_same_size_and_outputs_logits():
    config = vitlab.config_for("mu/8", image_size=32, num_classes=5)
    counts = {}
    images = torch.randn(2, 3, 32, 32)
    for name in TORCH_IMPLEMENTATIONS:
        model = build(name, config).eval()
        counts[name] = sum(p.numel() for p in model.parameters())
        randomise_(model)  # vitlab's and torchvision's heads start at zero: logits all 0 whatever the input
        with torch.no_grad():
            logits = model(images)
        assert logits.shape == (2, 5) and torch.isfinite(logits).all(), name
        assert (logits[0] - logits[1]).abs().max() > 1e-3, f"{name}: the logits do not depend on the image"
    # Same architecture: the same parameter count up to the class token / position table layout.
    assert max(counts.values()) - min(counts.values()) <= config.dim, counts


@pytest.mark.integration
def test_tiny_run_reports_every_implementation_with_sane_fields(tiny_results):
    infer, train = tiny_results["cases"]
    assert [row["implementation"] for row in infer["rows"]] == TORCH_IMPLEMENTATIONS
    assert [row["implementation"] for row in train["rows"]] == ["vitlab", "timm"]
    for case in (infer, train):
        for row in case["rows"]:
            assert row["images_per_s"] > 0
            assert row["images_per_s"] == max(row["modes"].values())  # the best mode is reported
            assert 0 < row["mfu"] < 1 if row["implementation"] not in OTHER_NUMERICS else row["mfu"] is None
            assert row["peak_memory_mib"] > 0
        speeds = {row["implementation"]: row["images_per_s"] for row in case["rows"]}
        best_peer = max((name for name in speeds if name != "vitlab"), key=speeds.get)
        assert case["best_peer"] == best_peer
        assert case["vitlab_over_best_peer"] == pytest.approx(speeds["vitlab"] / speeds[best_peer])
        assert case["vitlab_over_timm"] == pytest.approx(speeds["vitlab"] / speeds["timm"])
    assert set(infer["rows"][0]["modes"]) == {"eager", "eager+bf16w"}
    for contender in infer["contenders"]:
        assert len(contender["seconds"]) == 3 and contender["calls"] >= 1
    assert train["flops_per_image"] > infer["flops_per_image"]  # backward costs about twice the forward
    peak = tiny_results["gemm_peak_flops"]
    assert peak["fp32"] > 0 and peak["bf16"] > 0


@pytest.mark.unit
def test_results_are_written_as_json_and_markdown(tiny_results, tmp_path):
    json_path, md_path = write(tiny_results, tmp_path)
    assert json.loads(json_path.read_text())["cases"][0]["variant"] == "mu/8"
    table = md_path.read_text()
    assert table == machine_line(tiny_results["machine"]) + "\n\n" + markdown(tiny_results)
    assert "| mu/8 @32 | infer | bf16 | 2 |" in table
    for name in TORCH_IMPLEMENTATIONS:
        assert f"| {name} |" in table


@pytest.mark.integration
def test_onnxruntime_fp32_and_int8_run_beside_vitlab():
    config = BenchConfig(
        cases=[CaseSpec(Case("mu/8", 32, 2, "fp32", "infer"), ("vitlab", "timm", *ONNXRUNTIME), ("eager",))],
        rounds=2,
        warmup=1,
        min_sample_s=0.01,
        gemm_sizes=(512,),  # large enough that one product is not timer noise on a busy machine
    )
    results = run_bench(config)
    (case,) = results["cases"]
    rows = {row["implementation"]: row for row in case["rows"]}
    assert list(rows) == ["vitlab", "timm", *ONNXRUNTIME]
    for name in ONNXRUNTIME:
        assert set(rows[name]["modes"]) == {"eager"} and rows[name]["images_per_s"] > 0
        assert rows[name]["peak_memory_mib"] is None  # onnxruntime's memory is outside PyTorch's allocator
    assert rows["vitlab"]["peak_memory_mib"] > 0
    assert case["best_peer"] != "onnxruntime-int8"  # other numerics: shown, never the best peer
    table = markdown(results)
    assert "| mu/8 @32 | infer | fp32 | onnxruntime-int8 | eager |" in table
    assert f"CPU capability {torch.backends.cpu.get_cpu_capability()}" in machine_line(results["machine"])
    assert not Mode.parse("eager").applies_to(Case("mu/8", 32, 2, "bf16", "infer"), "onnxruntime")


@pytest.mark.integration
def test_vitlab_int8_runs_its_fast_path_in_the_fp32_case_only():
    config = BenchConfig(
        cases=[CaseSpec(Case("mu/8", 32, 2, "fp32", "infer"), ("vitlab", "vitlab-int8"), ("eager", "fast"))],
        rounds=2,
        warmup=1,
        min_sample_s=0.01,
        gemm_sizes=(512,),
    )
    (case,) = run_bench(config)["cases"]
    rows = {row["implementation"]: row for row in case["rows"]}
    assert set(rows["vitlab-int8"]["modes"]) == {"fast"} and rows["vitlab-int8"]["images_per_s"] > 0
    assert case["best_peer"] is None  # int8's numbers differ: never the peer vitlab is measured against
    fast = Mode.parse("fast")
    assert not fast.applies_to(Case("mu/8", 32, 2, "bf16", "infer"), "vitlab-int8")
    assert not fast.applies_to(Case("mu/8", 32, 2, "fp32", "train"), "vitlab-int8")
    assert not Mode.parse("eager").applies_to(Case("mu/8", 32, 2, "fp32", "infer"), "vitlab-int8")


@pytest.mark.unit
def test_interleaved_rounds_rotate_the_order():
    calls = []
    steps = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    seconds = interleaved(steps, rounds=3, device=CPU)
    assert calls == list("abcbcacab")
    assert all(len(values) == 3 for values in seconds.values())


@pytest.mark.unit
def test_peak_memory_sees_a_temporary_tensor():
    def step():
        buffer = torch.ones(2 * 2**20)  # 8 MiB, freed before the step returns
        return buffer.sum()

    assert 8 * 2**20 <= step_peak_bytes(step, CPU) < 9 * 2**20


@pytest.mark.integration
def test_peak_memory_keeps_the_profilers_lines_off_stderr():
    """Kineto prints "profiler_start" / "profiler_stop" and, without a GPU, an ERROR line to stderr."""
    code = "import torch; from vitlab.bench.memory import cpu_peak_bytes; print(cpu_peak_bytes(lambda: torch.ones(99)))"
    env = {name: value for name, value in os.environ.items() if name != "KINETO_LOG_LEVEL"}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert int(run.stdout) > 0
    assert "profiler_st" not in run.stderr and "ERROR" not in run.stderr, run.stderr


@pytest.mark.unit
def test_flop_count_matches_the_analytic_formula():
    config = vitlab.config_for("Ti/16")
    d, n, t, layers = config.dim, config.num_patches, config.num_patches + 1, config.depth
    patch = 2 * n * (16 * 16 * 3) * d
    per_layer = t * 2 * (3 * d * d + d * d + 2 * d * config.mlp_dim) + 2 * 2 * t * t * d
    head = 2 * d * config.num_classes
    assert model_flops(config) == patch + layers * per_layer + head  # 2.51 GFLOP, as usually quoted


@pytest.mark.unit
def test_gemm_peak_is_a_rate():
    assert 1e8 < gemm_peak(torch.float32, CPU, sizes=(128,), repeats=2) < 1e15


@pytest.mark.unit
def test_modes_parse_and_apply():
    assert Mode.parse("compile+bf16w") == Mode(compiled=True, bf16_weights=True)
    infer_bf16 = Case("mu/8", 32, 2, "bf16", "infer")
    train_bf16 = Case("mu/8", 32, 2, "bf16", "train")
    assert Mode.parse("fast").applies_to(infer_bf16, "vitlab")
    assert not Mode.parse("fast").applies_to(infer_bf16, "timm")
    assert not Mode.parse("eager+bf16w").applies_to(train_bf16, "timm")
    with pytest.raises(ValueError, match="unknown mode 'jit'"):
        Mode.parse("jit")


@pytest.mark.unit
@pytest.mark.parametrize(
    "text, message",
    [
        ("Ti/16:infer", "is not VARIANT:TASK:DTYPE"),
        ("Ti/16:infer:fp64", "unknown dtype 'fp64'"),
        ("Ti/16:predict:fp32", "unknown task 'predict'"),
        ("Ti/16:infer:fp32:many", "batch 'many'"),
        ("Ti/16:infer:fp32:8:jax", "unknown implementation 'jax'"),
        ("X/16:infer:fp32", "unknown model size 'X'"),
    ],
)
def test_bad_case_strings_name_the_problem(text, message):
    with pytest.raises(ValueError, match=message):
        CaseSpec.parse(text)


@pytest.mark.unit
def test_case_string_parses():
    spec = CaseSpec.parse("B/16:train:bf16:8:vitlab,timm", image_size=384)
    assert spec.case == Case("B/16", 384, 8, "bf16", "train")
    assert spec.implementations == ("vitlab", "timm")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cli_runs_a_case_and_prints_the_ratio(tmp_path, capsys):
    code = cli_main(
        [
            "bench",
            "mu/8:infer:fp32:2",
            "--image-size",
            "32",
            "--impls",
            "vitlab,timm",
            "--modes",
            "eager",
            "--rounds",
            "2",
            "--warmup",
            "1",
            "--no-memory",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "mu/8@32 infer fp32: vitlab / best peer (timm) = " in out
    assert f"CPU capability {torch.backends.cpu.get_cpu_capability()}" in out
    results = json.loads((tmp_path / "bench.json").read_text())
    assert results["kind"] == "model-only" and "emulation" in results["machine"]
    assert (tmp_path / "bench.md").read_text() == machine_line(results["machine"]) + "\n\n" + results["markdown"]
    assert results["cases"][0]["rows"][0]["peak_memory_mib"] is None


@pytest.mark.unit
def test_cli_names_a_bad_case_in_one_line(tmp_path, capsys):
    assert cli_main(["bench", "Ti/16:infer:fp64", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown dtype 'fp64'" in err


@pytest.mark.integration
def test_gpu_script_runs_tiny_on_cpu(tmp_path, capsys):
    flags = ["--tiny", "--device", "cpu", "--rounds", "2", "--modes", "eager", "--ddp-steps", "2"]
    flags += ["--out", str(tmp_path), "--inductor-cache", str(tmp_path / "inductor")]
    assert gpu_main(flags) == 0
    summary = (tmp_path / "summary.txt").read_text()
    assert "mu/16@32 infer bf16 batch 2: vitlab" in summary and "timm" in summary
    assert "of the measured GEMM peak" in summary and "no datasheet peak known" in summary
    assert "vitlab / timm = " in summary
    assert (tmp_path / "bench.json").exists()
    # The input pipeline decoding on the device (here the CPU) against the CPU one: timed, and the same images.
    assert "input pipeline at 32 px, batch 4: decode + crop + flip + RandAugment + normalise on cpu" in summary
    comparison = json.loads((tmp_path / "bench.json").read_text())["input_pipeline"]["comparison"]
    assert comparison["within_tolerance"] and comparison["mean_levels"] < 0.5 and "within the tolerance" in summary
    # A few data-parallel steps under torchrun (gloo here, nccl on GPUs): two processes' slices of one
    # batch give the whole batch's gradients; ddp.json renders in docs/benchmarks.md beside bench.json.
    assert "data-parallel mu/16@32 over gloo, 2 process(es) x 2 images" in summary
    assert "gradient check passed" in summary
    ddp = json.loads((tmp_path / "ddp.json").read_text())
    assert ddp["check"]["passed"] and 0 < ddp["check"]["max_difference"] < 1e-4 and len(ddp["timing"]["losses"]) == 4
    out = tmp_path / "docs" / "benchmarks.md"
    assert cli_main(["bench", "report", "--runs", str(tmp_path), "--out", str(out)]) == 0
    assert "### Data-parallel training (gloo)" in out.read_text()


@pytest.mark.unit
@pytest.mark.parametrize(
    ("name", "part"),
    [
        ("NVIDIA H200", ("H200", 989.0)),
        ("NVIDIA H200 NVL", ("H200 NVL", 835.0)),
        ("NVIDIA H100 80GB HBM3", ("H100", 989.0)),
        ("NVIDIA H100 PCIe", ("H100 PCIe", 756.0)),
        ("NVIDIA A100-SXM4-80GB", ("A100", 312.0)),
        ("NVIDIA L4", ("L4", 121.0)),
        ("NVIDIA L40S", ("L40S", 362.0)),
        ("NVIDIA GeForce RTX 4090", None),
        (None, None),
    ],
)
def test_mfu_is_quoted_against_the_datasheet_peak_of_the_part_named(name, part):
    assert spec_peak(name) == part


@pytest.mark.unit
def test_a_gpu_decoder_is_held_to_its_own_tolerance_stated_as_such():
    from vitlab.bench.gpu_input import GPU_DECODER_TOLERANCE, TOLERANCE, summary_lines, tolerance_for

    assert tolerance_for(torch.device("cuda", 0)) is GPU_DECODER_TOLERANCE and tolerance_for(CPU) is TOLERANCE
    comparison = {"images": 4, "mean_levels": 3.0, "max_levels": 20.0, "outlier_fraction": 0.02}
    comparison.update(within_tolerance=True, tolerance=GPU_DECODER_TOLERANCE, decoder="the GPU's (nvJPEG)")
    timing = {"batch": 4, "device": "cuda:0", "device_images_per_s": 1.0, "cpu_images_per_s_one_process": 1.0}
    line = summary_lines({"comparison": comparison, "timing": {**timing, "torch_threads": 1}, "image_size": 224})[1]
    assert "decoded by the GPU's (nvJPEG): within the tolerance (mean <= 4.0" in line
    assert "stated for a GPU decoder before any was measured" in line
