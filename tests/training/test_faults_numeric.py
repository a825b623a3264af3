"""Numerical faults (issue 6): a step with a non-finite loss or gradient is skipped and counted with a
message naming it; run.max_bad_steps of them in a row stop the run and the last good checkpoint stays."""

from __future__ import annotations

import copy
import logging
import math

import pytest
import torch
from torch import nn

from helpers import TINY_FLAGS, tiny_config
from vitlab.cli import main
from vitlab.training import Callback, Diverged, Trainer
from vitlab.training import checkpoint as ckpt

pytestmark = pytest.mark.integration


class Poisoned(nn.Module):
    """The network, except that at the optimiser steps in `steps` it returns NaN logits ("loss") or
    finite logits whose gradient is NaN ("grad")."""

    def __init__(self, trainer: Trainer, steps: set[int], kind: str) -> None:
        super().__init__()
        self.trainer, self.network, self.steps, self.kind = trainer, trainer.network, steps, kind

    def forward(self, images):
        logits = self.network(images)
        if self.trainer.step + 1 not in self.steps:
            return logits
        if self.kind == "loss":
            return logits * float("nan")
        return logits + (logits * 0).detach() + _nan_gradient(logits)


def _nan_gradient(tensor):
    zero = (tensor * 0).sum()
    zero.register_hook(lambda grad: grad * float("nan"))
    return zero


class Snapshots(Callback):
    """Model, optimiser and EMA state after every step."""

    def __init__(self) -> None:
        self.after: dict[int, dict] = {}

    def on_step_end(self, trainer, loss):
        self.after[trainer.step] = copy.deepcopy(
            {
                "model": trainer.model.state_dict(),
                "optimizer": trainer.optimizer.state_dict(),
                "ema": trainer.ema.state_dict(),
            }
        )


def equal(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a) and a.keys() == b.keys()


@pytest.mark.fault("numeric")
@pytest.mark.parametrize("kind", ["loss", "grad"])
def test_non_finite_steps_are_skipped_counted_and_named(tmp_path, caplog, kind):
    snapshots = Snapshots()
    trainer = Trainer(tiny_config(tmp_path, schedule={"steps": 6}, optim={"ema_decay": 0.9}), [snapshots])
    trainer.network = Poisoned(trainer, {3, 4}, kind)
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        result = trainer.fit()
    what = "loss nan" if kind == "loss" else "gradient norm nan"
    warnings = [r.getMessage() for r in caplog.records if "non-finite" in r.getMessage()]
    assert warnings == [
        f"step 3: non-finite {what}; step skipped (1 in a row, 1 in all; 10 in a row stop the run)",
        f"step 4: non-finite {what}; step skipped (2 in a row, 2 in all; 10 in a row stop the run)",
    ]
    for part in ("model", "ema"):  # the skipped steps changed nothing; the others did
        assert equal(snapshots.after[2][part], snapshots.after[4][part])
        assert not equal(snapshots.after[4][part], snapshots.after[5][part])
    adam = snapshots.after[4]["optimizer"]["state"][0]
    assert adam["step"] == 2 and torch.equal(adam["exp_avg"], snapshots.after[2]["optimizer"]["state"][0]["exp_avg"])
    assert result.summary["skipped_steps"] == 2 and result.summary["steps"] == 6
    assert all(torch.isfinite(p).all() for p in result.model.parameters())
    assert math.isfinite(result.summary["val_loss"])


@pytest.mark.fault("numeric")
def test_too_many_bad_steps_in_a_row_stop_the_run_and_keep_the_last_good_checkpoint(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, run={"ckpt_every_steps": 2, "keep_ckpts": 1, "max_bad_steps": 3}))
    trainer.network = Poisoned(trainer, set(range(6, 41)), "loss")
    with pytest.raises(
        Diverged,
        match=r"step 8: non-finite loss nan, 3 steps in a row \(run\.max_bad_steps=3\); "
        r"stopped\. Last good checkpoint: .*step-00000004\.pt",
    ):
        trainer.fit()
    assert ckpt.list_checkpoints(tmp_path) == [ckpt.latest_checkpoint(tmp_path)]  # step 6 was not saved
    good = ckpt.load_checkpoint(ckpt.latest_checkpoint(tmp_path))
    assert good["step"] == 4 and all(torch.isfinite(t).all() for t in good["model"].values())


@pytest.mark.fault("numeric")
def test_a_diverging_command_line_run_stops_with_one_line(tmp_path, capsys):
    # A learning rate of 1e30 sends the weights to infinity at once: from then on every loss is NaN.
    status = main(["train", *TINY_FLAGS, "--out", str(tmp_path), "--lr", "1e30", "--max-bad-steps", "2"])
    err = capsys.readouterr().err
    assert status == 3
    assert any(
        line.startswith("vitlab train: step ")
        and "2 steps in a row (run.max_bad_steps=2); stopped. Last good checkpoint: " in line
        for line in err.splitlines()
    ), err
    assert "Traceback" not in err
