"""Resuming (issue 6): a resume checkpoint that does not fit the run, or is not a checkpoint at all, is
one CheckpointError naming the file, and no code in it runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers import MarkerPayload, tiny_config
from vitlab.model import ConfigError
from vitlab.train import Trainer
from vitlab.train import atomic_files as files
from vitlab.train import checkpoint as ckpt
from vitlab.weights import CheckpointError


def test_resume_refuses_other_settings_and_a_foreign_architecture(tmp_path):
    Trainer(tiny_config(tmp_path, schedule={"steps": 3})).fit()
    with pytest.raises(ConfigError, match="pass --resume"):
        Trainer(tiny_config(tmp_path, schedule={"steps": 3}))
    with pytest.raises(ConfigError, match=r"model\.dim: checkpoint None, now 48"):
        Trainer(tiny_config(tmp_path, model={"dim": 48}, run={"resume": True}))


def corrupt_truncated(path: Path) -> str:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return "not a readable PyTorch checkpoint"


def corrupt_with_code(path: Path) -> str:
    state = torch.load(path, weights_only=True)
    torch.save({**state, "payload": MarkerPayload(path.parent / "pwned")}, path)
    return r"refused to unpickle.*GLOBAL io\.open"


def corrupt_foreign(path: Path) -> str:
    torch.save({"model": {"weight": torch.zeros(2)}}, path)
    return "not a vitlab training checkpoint"


def corrupt_shapes(path: Path) -> str:
    state = torch.load(path, weights_only=True)
    state["model"]["pos_embed.weight"] = torch.zeros(1, 9, 64)
    torch.save(state, path)
    return r"does not fit this run \(.*size mismatch for pos_embed\.weight"


def corrupt_missing_entry(path: Path) -> str:
    state = torch.load(path, weights_only=True)
    del state["optimizer"]
    torch.save(state, path)
    return "does not fit this run \\(it has no entry 'optimizer'\\)"


@pytest.mark.parametrize(
    "corrupt", [corrupt_truncated, corrupt_with_code, corrupt_foreign, corrupt_shapes, corrupt_missing_entry]
)
def test_a_bad_resume_checkpoint_is_one_error_naming_the_file(tmp_path, corrupt):
    Trainer(tiny_config(tmp_path, schedule={"steps": 3})).fit()
    path = ckpt.latest_checkpoint(tmp_path)
    match = corrupt(path)
    files.record_checksums(path)  # as if it had been written so: the checks after the checksum's are tried
    with pytest.raises(CheckpointError, match=match) as caught:
        Trainer(tiny_config(tmp_path, schedule={"steps": 3}, run={"resume": True}))
    assert str(path.parent) in str(caught.value) and "\n" not in str(caught.value)
    assert not (path.parent / "pwned").exists()  # the pickled code never ran
