"""Resuming (issue 6): a resume checkpoint that does not fit the run, or is not a checkpoint at all, is
one CheckpointError naming the file, and no code in it runs. Helpers shared by the fault tests."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from test_weights_bad_input import MarkerPayload
from train_helpers import tiny_config
from vitlab.model import ConfigError
from vitlab.train import Callback, Trainer
from vitlab.train import checkpoint as ckpt
from vitlab.weights import CheckpointError


def assert_same_state(a: dict, b: dict, where: str = "") -> None:
    """Nested dicts/lists of tensors and numbers, compared bitwise."""
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same_state(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), f"{where} differs"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def final_state(out: Path) -> dict:
    """What must not depend on interruptions: the learned state of the last checkpoint."""
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(out))
    return {key: state[key] for key in ("step", "epoch", "batch_in_epoch", "model", "optimizer", "scheduler",
                                        "ema", "loss_sum", "loss_count", "rng")}


class SignalAt(Callback):
    """Sends this process `signum` after optimiser step `step`, as a user's Ctrl-C or a scheduler would."""

    def __init__(self, step: int, signum: int = signal.SIGTERM) -> None:
        self.step, self.signum = step, signum

    def on_step_end(self, trainer, loss):
        if trainer.step == self.step:
            os.kill(os.getpid(), self.signum)


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


@pytest.mark.parametrize("corrupt", [corrupt_truncated, corrupt_with_code, corrupt_foreign, corrupt_shapes,
                                     corrupt_missing_entry])
def test_a_bad_resume_checkpoint_is_one_error_naming_the_file(tmp_path, corrupt):
    Trainer(tiny_config(tmp_path, schedule={"steps": 3})).fit()
    path = ckpt.latest_checkpoint(tmp_path)
    match = corrupt(path)
    ckpt.record_checksums(path)  # as if it had been written so: the checks after the checksum's are tried
    with pytest.raises(CheckpointError, match=match) as caught:
        Trainer(tiny_config(tmp_path, schedule={"steps": 3}, run={"resume": True}))
    assert str(path.parent) in str(caught.value) and "\n" not in str(caught.value)
    assert not (path.parent / "pwned").exists()  # the pickled code never ran
