"""The CPU kernels are chosen by what the CPU can do (vitlab.accel.kernels), under a faked CPU."""

from __future__ import annotations

import json
import logging

import pytest
import torch
import torch.nn.functional as F

from vitlab.accel import accelerate, cpu, kernels
from vitlab.accel.blocked import blocked_attention
from vitlab.accel.layers import Linear
from vitlab.model.attention import Attention
from vitlab.runtime import resolve_precision

CPU = torch.device("cpu")


def fake_cpu(monkeypatch, capability: str, native_bf16: bool, timings: dict | None = None) -> list[int]:
    """Pretend to be a CPU of `capability`; `timings` is what timing the two attention paths gives.
    Returns a list that grows by one per timing."""
    monkeypatch.setattr(kernels, "cpu_capability", lambda: capability)
    monkeypatch.setattr(kernels, "onednn_supports", lambda dtype: native_bf16 or dtype == torch.float32)
    timed: list[int] = []

    def time_paths(dtype, matmul):
        if timings is None:
            raise AssertionError("the attention paths were timed")
        timed.append(1)
        return dict(timings)

    monkeypatch.setattr(kernels, "time_attention_paths", time_paths)
    monkeypatch.setattr(kernels, "_native", {})
    monkeypatch.setattr(kernels, "_attention", {})
    return timed


@pytest.mark.unit
def test_avx2_without_native_bf16_takes_the_fused_kernel_and_fp32(monkeypatch, caplog):
    fake_cpu(monkeypatch, "AVX2", native_bf16=False)
    with caplog.at_level(logging.DEBUG, logger="vitlab"):
        assert kernels.attention_path(torch.bfloat16, CPU, blocked_attention) == "fused"
        assert kernels.attention_path(torch.bfloat16, CPU, blocked_attention) == "fused"
    assert not kernels.native(torch.bfloat16)
    assert resolve_precision("auto", CPU).name == "fp32"
    said = [record.getMessage() for record in caplog.records]
    assert len(said) == 1 and "AVX2 without native bf16" in said[0] and "fused attention" in said[0], said


@pytest.mark.unit
def test_native_bf16_takes_the_measured_path_and_caches_it(monkeypatch, tmp_path):
    monkeypatch.setenv(kernels.CACHE_ENV, str(tmp_path))
    for faster in ("matmul", "fused"):
        timings = {"attention": faster, "fused_ms": 2.0, "matmul_ms": 1.0}
        (tmp_path / "cpu-kernels.json").unlink(missing_ok=True)
        timed = fake_cpu(monkeypatch, "AVX512", native_bf16=True, timings=timings)
        assert kernels.attention_path(torch.bfloat16, CPU, blocked_attention) == faster
        assert (
            kernels.attention_path(torch.float32, CPU, blocked_attention) == "fused"
        )  # fp32: the fused kernel, not timed
        assert timed == [1]
    # Read back from the file in a new process (the choices forgotten), not timed again.
    fake_cpu(monkeypatch, "AVX512", native_bf16=True, timings=None)
    assert kernels.attention_path(torch.bfloat16, CPU, blocked_attention) == "fused"
    entries = json.loads((tmp_path / "cpu-kernels.json").read_text())
    assert list(entries) == [kernels.machine_key("attention bf16")] and "AVX512" in list(entries)[0]


CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: {family}
model\t\t: {model}
model name\t: AMD EPYC

processor\t: 1
vendor_id\t: AuthenticAMD
cpu family\t: 99
model\t\t: 99
model name\t: another name
"""


@pytest.mark.integration
def test_cpus_of_one_name_are_told_apart_by_family_and_model(monkeypatch, tmp_path):
    """Two EPYCs of one name but different generations: each measures its own attention path, neither
    reads the other's from a cache file they share."""
    monkeypatch.setenv(kernels.CACHE_ENV, str(tmp_path))
    info = tmp_path / "cpuinfo"
    monkeypatch.setattr(cpu, "CPUINFO", info)
    keys = []
    for family, model, faster in ((25, 17, "fused"), (26, 2, "matmul")):
        info.write_text(CPUINFO.format(family=family, model=model))
        assert cpu.cpu_name() == "AMD EPYC"  # the first processor's block only
        assert cpu.cpu_model() == f"AuthenticAMD family {family} model {model}"
        timed = fake_cpu(monkeypatch, "AVX512", True, {"attention": faster, "fused_ms": 1.0, "matmul_ms": 1.0})
        assert kernels.attention_path(torch.bfloat16, CPU, blocked_attention) == faster
        assert timed == [1]  # measured here, not read from the other CPU's entry
        keys.append(kernels.machine_key("attention bf16"))
    assert list(json.loads((tmp_path / "cpu-kernels.json").read_text())) == keys
    info.write_text("processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd40\n")  # Arm's fields
    assert cpu.cpu_model() == "implementer 0x41 part 0xd40"
    monkeypatch.setattr(cpu, "CPUINFO", tmp_path / "absent")
    assert cpu.cpu_name() and cpu.cpu_model()  # the platform module's words where Linux has none


@pytest.mark.unit
@pytest.mark.fault("cache", kinds=1)
@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"%s": {"attention": "sideways"}}'])
def test_a_corrupt_cache_file_is_measured_again(monkeypatch, tmp_path, caplog, text):
    monkeypatch.setenv(kernels.CACHE_ENV, str(tmp_path))
    timed = fake_cpu(monkeypatch, "AVX512", True, {"attention": "matmul", "fused_ms": 2.0, "matmul_ms": 1.0})
    path = tmp_path / "cpu-kernels.json"
    path.write_text(text.replace("%s", kernels.machine_key("attention bf16")))
    with caplog.at_level(logging.INFO, logger="vitlab"):
        assert kernels.attention_path(torch.bfloat16, CPU, blocked_attention) == "matmul"
    assert timed == [1]
    assert json.loads(path.read_text())[kernels.machine_key("attention bf16")]["attention"] == "matmul"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == (0 if text.startswith('{"') else 1)  # an unknown entry is simply replaced
    assert all("\n" not in w and "cpu-kernels.json" in w for w in warnings)


@pytest.mark.unit
@pytest.mark.fault("cache", kinds=1)
def test_a_cache_folder_that_cannot_be_written_measures_for_this_process_and_says_so(monkeypatch, tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(kernels.CACHE_ENV, str(blocker / "cache"))  # a folder inside a file
    timed = fake_cpu(monkeypatch, "AVX512", True, {"attention": "matmul", "fused_ms": 2.0, "matmul_ms": 1.0})
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        assert kernels.attention_path(torch.bfloat16, CPU, blocked_attention) == "matmul"
    assert timed == [1]
    warnings = [r.getMessage() for r in caplog.records]
    assert (
        len(warnings) == 1
        and "cannot be written" in warnings[0]
        and "attention bf16 measured for this process only" in warnings[0]
    )


@pytest.mark.unit
def test_without_native_bf16_a_linear_layer_runs_as_fp32_gemm_on_bf16_operands(monkeypatch):
    layer = Linear(48, 40)
    x = torch.randn(6, 48)
    rounded = F.linear(*(t.bfloat16().float() for t in (x, layer.weight, layer.bias)))
    gemm_dtypes = []
    linear = F.linear
    monkeypatch.setattr(F, "linear", lambda x, *params: gemm_dtypes.append(x.dtype) or linear(x, *params))
    fake_cpu(monkeypatch, "AVX2", native_bf16=False)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        emulated = layer(x)
    with torch.no_grad():
        cast = layer.bfloat16()(x.bfloat16())
    assert gemm_dtypes == [torch.float32, torch.float32]
    assert emulated.dtype == cast.dtype == torch.bfloat16
    torch.testing.assert_close(emulated, rounded.bfloat16(), rtol=0, atol=0)  # the fp32 GEMM, rounded once
    torch.testing.assert_close(cast, rounded.bfloat16(), rtol=0, atol=0)
    fake_cpu(monkeypatch, "AVX512", native_bf16=True)
    native = layer(x.bfloat16())  # the bf16 kernel: the same numbers up to the order of summation
    assert gemm_dtypes[2:] == [torch.bfloat16]
    torch.testing.assert_close(native.float(), rounded, rtol=2e-2, atol=2e-2)
    if kernels.onednn_linear_runs(torch.bfloat16):  # this CPU's own (not faked): oneDNN's bf16 linear, no F.linear
        with torch.no_grad():
            inference = layer(x.bfloat16())
        assert gemm_dtypes[3:] == []
        torch.testing.assert_close(inference, native.detach(), rtol=1e-2, atol=1e-2)


@pytest.mark.unit
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_linear_gelu_in_onednns_epilogue_is_gelu_of_the_linear(dtype, approximate):
    if dtype == torch.bfloat16 and not kernels.native(dtype):
        pytest.skip("bf16 is not native on this CPU: Linear.gelu is F.gelu(F.linear) there")
    layer = Linear(48, 40).to(dtype)
    x = torch.randn(6, 48).to(dtype)
    with torch.no_grad():
        fused = layer.gelu(x, approximate)
        expected = F.gelu(F.linear(x.float(), layer.weight.float(), layer.bias.float()), approximate=approximate)
    assert fused.dtype == dtype
    tolerance = 1e-6 if dtype == torch.float32 else 2e-2  # fp32: ATen's own GELU
    torch.testing.assert_close(fused.float(), expected, rtol=tolerance, atol=tolerance)


@pytest.mark.unit
def test_attention_compiles_whole_with_the_choice_made_at_trace_time(monkeypatch):
    fake_cpu(monkeypatch, "AVX2", native_bf16=False)
    attention = accelerate(torch.nn.ModuleList([Attention(32, 2)]))[0].eval().bfloat16()
    x = torch.randn(2, 9, 32).bfloat16()
    with torch.no_grad():
        compiled = torch.compile(attention, fullgraph=True, backend="aot_eager")(x)[0]
        torch.testing.assert_close(compiled, attention(x)[0], rtol=0, atol=0)


@pytest.mark.unit
def test_the_fp32_gemm_library_is_measured_once_per_machine_and_cached(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(kernels.CACHE_ENV, str(tmp_path))
    fake_cpu(monkeypatch, "AVX512", native_bf16=True)
    timed = []
    for faster in ("onednn", "mkl"):
        (tmp_path / "cpu-kernels.json").unlink(missing_ok=True)
        monkeypatch.setattr(kernels, "_gemm", {})
        entry = {"gemm": faster, "mkl_gflops": 198.0, "onednn_gflops": 436.0}
        monkeypatch.setattr(kernels, "time_fp32_gemms", lambda entry=entry: timed.append(1) or dict(entry))
        with caplog.at_level(logging.INFO, logger="vitlab"):
            assert kernels.fp32_gemm() == kernels.fp32_gemm() == faster
    assert timed == [1, 1] and "fp32 inference GEMMs through MKL (measured: MKL 198, oneDNN 436" in caplog.text
    monkeypatch.setattr(kernels, "_gemm", {})  # a new process reads the file
    monkeypatch.setattr(kernels, "time_fp32_gemms", lambda: pytest.fail("timed again"))
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="vitlab"):
        assert kernels.fp32_gemm() == "mkl"
    # read back, the choice is said at debug level only: it does not interrupt every command's output
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "GEMMs through" in r.getMessage()]
    assert len(said) == 1 and said[0][0] == logging.DEBUG and "measured earlier" in said[0][1], said
    assert list(json.loads((tmp_path / "cpu-kernels.json").read_text())) == [kernels.machine_key("fp32 gemm")]


@pytest.mark.unit
def test_timing_the_fp32_gemms_runs_both_libraries():
    entry = kernels.time_fp32_gemms(repeats=1)
    assert entry["gemm"] in ("mkl", "onednn") and entry["mkl_gflops"] > 0 and entry["onednn_gflops"] > 0


@pytest.mark.unit
@pytest.mark.parametrize("library", ["onednn", "mkl"])
def test_eager_fp32_inference_linears_run_in_the_chosen_library(monkeypatch, library):
    """oneDNN's linear only for eager fp32 without autograd where fp32_gemm chose it; the same numbers."""
    monkeypatch.setattr(kernels, "_gemm", {"fp32": library})
    layer = Linear(48, 40)
    x = torch.randn(2, 7, 48)
    expected = x @ layer.weight.T + layer.bias
    calls = []
    linear = F.linear
    monkeypatch.setattr(F, "linear", lambda *args: calls.append(1) or linear(*args))
    with torch.no_grad():
        inference = layer(x)
        transposed = layer(x.transpose(0, 1))  # a non-contiguous input
    assert len(calls) == (0 if library == "onednn" else 2)
    torch.testing.assert_close(inference, expected.detach(), rtol=0, atol=1e-5)
    torch.testing.assert_close(transposed, expected.detach().transpose(0, 1), rtol=0, atol=1e-5)
    layer(x).sum().backward()  # with autograd: ATen's linear, whatever the library
    assert len(calls) == (1 if library == "onednn" else 3) and layer.weight.grad is not None


@pytest.mark.unit
def test_a_linear_onednn_refuses_runs_in_aten_and_the_log_says_so_once(monkeypatch, caplog):
    """Where oneDNN has no kernel for the operands (bf16 on AVX2) the eager inference linear is ATen's."""
    fake_cpu(monkeypatch, "AVX512", native_bf16=True)
    monkeypatch.setattr(kernels, "_onednn_runs", {})

    def refuses(*args):
        raise RuntimeError("could not create a primitive descriptor for the inner product. Run with ...")

    monkeypatch.setattr(kernels, "onednn_linear", refuses)
    layer = Linear(48, 40).bfloat16()
    x = torch.randn(6, 48).bfloat16()
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="vitlab"):
        assert not kernels.eager_onednn(x, layer.weight)
        out = layer(x)
        layer(x)
    torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias), rtol=0, atol=0)
    said = [r.getMessage() for r in caplog.records if "oneDNN" in r.getMessage()]
    assert said == ["oneDNN's bf16 linear does not run here (could not create a primitive descriptor for the "
                    "inner product): ATen's linear instead"], said  # fmt: skip


@pytest.mark.unit
def test_timing_the_kernels_leaves_the_global_rng_where_it_was():
    """A run that times its kernels draws the same initialisation and masks as one that does not."""
    before = torch.get_rng_state()
    kernels.time_fp32_gemms(repeats=1)
    kernels.time_attention_paths(torch.float32, lambda q, k, v, scale: q @ k.transpose(-2, -1) @ v, repeats=1)
    assert torch.equal(torch.get_rng_state(), before)
