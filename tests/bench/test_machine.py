"""The machine description beside every table: the CPU capability and any emulation of a lesser CPU."""

from __future__ import annotations

import torch

from vitlab.bench import markdown
from vitlab.bench.machine import EMULATION_ENVS, describe

CPU = torch.device("cpu")


def tables_of(machine: dict) -> str:
    return markdown({"machine": machine, "gemm_peak_flops": {"fp32": 1e11, "bf16": 1e11}, "cases": []})


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
    said = f"AVX2 (emulated on a {machine['cpu']}: ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2), bf16 emulated"
    assert text.count(said) == 2, text  # above each of the two tables
