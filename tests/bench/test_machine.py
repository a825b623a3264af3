"""The machine description beside every table: the CPU capability and any emulation of a lesser CPU."""

from __future__ import annotations

import pytest
import torch

from vitlab.bench import PRESETS, markdown
from vitlab.bench.implementations import ONNXRUNTIME
from vitlab.bench.machine import EMULATION_ENVS, describe
from vitlab.bench.report import machine_line
from vitlab.bench.targets import TARGETS
from vitlab.cli import main as cli_main

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
    assert all(s.implementations and not set(s.implementations) & set(ONNXRUNTIME) for s in specs)


@pytest.mark.fault("bench-cli", kinds=1)
def test_variants_that_select_no_case_are_named_in_one_line(tmp_path, capsys):
    assert cli_main(["bench", "--preset", "avx2", "--variants", "B/16", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--variants B/16" in err
    assert not (tmp_path / "bench.json").exists()
