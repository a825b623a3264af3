"""What CPU this is (vitlab.accel.cpu): its L2 cache read from sysfs, assumed aloud where absent; its
name, family and model are tested with the kernel choices they key (test_kernels.py)."""

from __future__ import annotations

import logging

import pytest

from vitlab.accel import cpu

pytestmark = pytest.mark.unit


def test_the_l2_cache_size_is_read_from_sysfs_and_assumed_aloud_where_absent(monkeypatch, tmp_path, caplog):
    for index, (level, kind, size) in enumerate(
        [("1", "Data", "48K"), ("1", "Instruction", "32K"), ("2", "Unified", "2M")]
    ):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (folder / name).write_text(text + "\n")
    assert cpu.reported_l2_bytes(tmp_path) == 2 * 2**20
    assert cpu.parse_cache_size("1024K") == 2**20 and cpu.parse_cache_size("512") == 512
    monkeypatch.setattr(cpu, "CPU_CACHES", tmp_path / "absent")
    monkeypatch.setattr(cpu, "_l2", [])
    with caplog.at_level(logging.INFO, logger="vitlab"):
        assert cpu.l2_cache_bytes() == cpu.L2_ASSUMED
    assert "no L2 cache size reported" in caplog.text
