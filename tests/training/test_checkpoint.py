"""Training checkpoints: atomic writes, the `latest` pointer, keeping K, safe reading, RNG round trips."""

from __future__ import annotations

import errno
import pickle
import random

import numpy as np
import pytest
import torch

from vitlab.training import checkpoint as ckpt
from vitlab.training import rng
from vitlab.weights import CheckpointError

pytestmark = pytest.mark.unit


def test_keeps_the_newest_and_points_latest_at_it(tmp_path):
    for step in (10, 20, 30, 40):
        ckpt.save_checkpoint(tmp_path, step, {"step": step, "weights": torch.full((3,), float(step))}, keep=2)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step-00000030.pt", "step-00000040.pt"]
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest.name == "step-00000040.pt"
    state = ckpt.load_checkpoint(latest)
    assert state["step"] == 40 and torch.equal(state["weights"], torch.full((3,), 40.0))
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]  # no temporaries


def test_a_failed_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    ckpt.save_checkpoint(tmp_path, 10, {"step": 10}, keep=3)

    def full_disk(obj, file):
        file.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt.torch, "save", full_disk)
    with pytest.raises(CheckpointError, match=r"step-00000020\.pt: cannot write \(the disk is full\); the previous"):
        ckpt.save_checkpoint(tmp_path, 20, {"step": 20}, keep=3)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "latest",
        "step-00000010.pt",
        "step-00000010.sha256",
    ]
    assert ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path))["step"] == 10


def test_unreadable_checkpoints_are_named(tmp_path):
    path = ckpt.save_checkpoint(tmp_path, 5, {"step": 5, "weights": torch.randn(1000)}, keep=1)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"step-00000005\.pt: .*checkpoint"):
        ckpt.load_checkpoint(path)
    foreign = tmp_path / "weights.pt"
    torch.save({"model": {}}, foreign)
    with pytest.raises(CheckpointError, match="weights.pt: not a vitlab training checkpoint"):
        ckpt.load_checkpoint(foreign)
    (tmp_path / "checkpoints" / "latest").write_text("../../etc/passwd\n")
    with pytest.raises(CheckpointError, match="latest: names '../../etc/passwd'"):
        ckpt.latest_checkpoint(tmp_path)


class RunsCode:
    def __reduce__(self):
        return (exec, ("import pathlib; pathlib.Path('MARKER').write_text('ran')",))


def test_a_pickle_with_code_is_refused_without_running_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps({"format": ckpt.FORMAT, "format_version": 1, "payload": RunsCode()}, protocol=2))
    with pytest.raises(CheckpointError, match=r"evil\.pt: "):
        ckpt.load_checkpoint(path)
    assert not (tmp_path / "MARKER").exists()


def test_random_generators_round_trip(tmp_path):
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    ckpt.save_checkpoint(tmp_path, 1, {"rng": rng.capture_rng()}, keep=1)
    expected = (random.random(), np.random.rand(), torch.rand(2))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    rng.restore_rng(ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path))["rng"])
    again = (random.random(), np.random.rand(), torch.rand(2))
    assert again[:2] == expected[:2] and torch.equal(again[2], expected[2])
