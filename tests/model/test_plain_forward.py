"""A plain forward writes nothing: the model is plain PyTorch (docs/architecture.md), so running it,
with autograd or without, in fp32 or under bf16 autocast, opens no file for writing, starts no
process and loads no native library, even where the cache folder is read-only and no C compiler is
on PATH (what vitlab.accel measures and builds happens in accel.accelerate, never here)."""

from __future__ import annotations

import os

import pytest
import torch

import vitlab
from helpers import bare_machine, randomise_, side_effects


@pytest.fixture
def read_only_cache(monkeypatch, tmp_path):
    cache = bare_machine(monkeypatch, tmp_path)
    yield cache
    cache.chmod(0o700)


@pytest.mark.unit
@pytest.mark.parametrize("name", ["Ti/8", "R20-small+Ti/4", "Axial-Ti/8"])
def test_a_plain_forward_writes_nothing(read_only_cache, name):
    model = randomise_(vitlab.create_model(name, image_size=32, num_classes=5), std=0.05)
    images = torch.randn(2, 3, 32, 32)
    with side_effects() as found:
        with torch.no_grad():
            model.eval()(images)
            with torch.autocast("cpu", torch.bfloat16):
                model(images)
        model.train()(images).sum().backward()
        if hasattr(model, "forward_with_attention"):
            model.eval().forward_with_attention(images)
    assert found == [], found
    assert os.listdir(read_only_cache) == []


@pytest.mark.integration  # it starts a process
def test_the_watch_sees_a_write_a_process_and_a_library(tmp_path):
    """The check above can fail: each kind of side effect is seen."""
    import ctypes
    import subprocess

    with side_effects() as found:
        (tmp_path / "x").write_text("")
        subprocess.run(["true"], check=False)
        ctypes.CDLL(None)
    assert len(found) == 3 and found[0].startswith("open") and "subprocess" in found[1] and "ctypes" in found[2]
