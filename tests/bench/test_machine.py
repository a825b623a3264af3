"""The machine description beside every table: the CPU capability and any emulation of a lesser CPU."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from vitlab.bench import PRESETS, markdown
from vitlab.bench.implementations import RUNTIMES
from vitlab.bench.machine import EMULATION_ENVS, describe, utilisation
from vitlab.bench.report import machine_line
from vitlab.bench.targets import TARGETS
from vitlab.cli import main as cli_main

pytestmark = pytest.mark.unit

CPU = torch.device("cpu")


def tables_of(machine: dict) -> str:
    """What bench.md and the document show: the machine line, then the tables."""
    return (
        machine_line(machine)
        + "\n\n"
        + markdown({"machine": machine, "gemm_peak_flops": {"fp32": 1e11, "bf16": 1e11}, "cases": []})
    )


def test_describe_records_the_emulation_variables_and_every_table_says_so(monkeypatch):
    for name in EMULATION_ENVS:
        monkeypatch.delenv(name, raising=False)
    machine = describe(CPU)
    assert machine["emulation"] == {} and machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert isinstance(machine["native_bf16"], bool)
    assert "emulated on" not in tables_of(machine)

    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    machine = describe(CPU)
    assert machine["emulation"] == {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    text = tables_of({**machine, "cpu_capability": "AVX2", "native_bf16": False})
    said = f"AVX2 (emulated on a {machine['cpu']} ({machine['cpu_model']}): ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2), bf16 emulated"
    assert text.count(said) == 2, text  # above each of the two tables


def test_the_avx2_preset_has_the_standard_cases_and_no_contender_that_ignores_the_emulation():
    specs = PRESETS["avx2"]()
    standard = {(s.case.variant, s.case.task, s.case.dtype) for s in PRESETS["standard"]()}
    assert {(s.case.variant, s.case.task, s.case.dtype) for s in specs} == {
        case for case in standard if case[0] != "B/16"
    }
    assert {(t.variant, t.numerator.task, t.numerator.dtype) for t in TARGETS["avx2"]} == {
        (s.case.variant, s.case.task, s.case.dtype) for s in specs
    }
    assert all(s.implementations and not set(s.implementations) & set(RUNTIMES) for s in specs)


def test_the_avx2_preset_on_a_cpu_with_native_bf16_says_it_measures_this_cpu(monkeypatch):
    from vitlab.bench import presets

    monkeypatch.setattr(presets, "native", lambda dtype: True)
    assert "this one has it" in (presets.misfit("avx2") or "")
    assert presets.misfit("standard") is None
    monkeypatch.setattr(presets, "native", lambda dtype: False)  # AVX2 only, or emulated
    assert presets.misfit("avx2") is None


@pytest.mark.fault("bench-cli", kinds=1)
def test_variants_that_select_no_case_are_named_in_one_line(tmp_path, capsys):
    assert cli_main(["bench", "--preset", "avx2", "--variants", "B/16", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--variants B/16" in err
    assert not (tmp_path / "bench.json").exists()


RECORDED = json.loads((Path(__file__).parents[1] / "fixtures" / "bench" / "tiny.json").read_text())


def mfu_cells(results: dict) -> dict[tuple[str, str, str], str]:
    """(dtype, task, implementation) -> the MFU cell of the per-implementation table."""
    cells = {}
    for line in markdown(results).splitlines():
        cols = [col.strip() for col in line.strip("|").split("|")]
        if len(cols) == 9 and cols[3] not in ("implementation", "---"):
            cells[(cols[2], cols[1], cols[3])] = cols[6]
    return cells


def test_mfu_is_against_the_fastest_gemm_on_the_dtypes_numbers_and_none_for_int8():
    peaks = {"fp32": 2e11, "bf16": 1e9}  # bf16 emulated: its own GEMM at 1 GFLOP/s
    assert utilisation(1e9, 10.0, "bf16", peaks) == pytest.approx(0.05)  # against fp32's peak, not 1000%
    assert utilisation(1e9, 10.0, "bf16", {"fp32": 2e11, "bf16": 5e11}) == pytest.approx(0.02)  # native bf16
    assert utilisation(1e9, 10.0, "fp32", {"fp32": 2e11, "bf16": 5e11}) == pytest.approx(0.05)
    assert utilisation(1e9, 10.0, "fp32", peaks, other_numerics=True) is None

    emulated = copy.deepcopy(RECORDED)
    emulated["gemm_peak_flops"] = peaks
    for case in emulated["cases"]:
        for row in case["rows"]:
            row["mfu"] = 99.0  # a stale stored value: the table computes its own
    cells = mfu_cells(emulated)
    bf16 = next(case for case in RECORDED["cases"] if case["dtype"] == "bf16" and case["task"] == "infer")
    expected = 100 * bf16["flops_per_image"] * bf16["rows"][0]["images_per_s"] / peaks["fp32"]
    assert cells[("bf16", "infer", "vitlab")] == f"{expected:.0f}%"
    assert cells[("fp32", "infer", "vitlab-int8")] == "-"
    assert cells[("fp32", "infer", "onnxruntime-int8")] == "-"
    assert cells[("fp32", "infer", "timm")] != "-"
