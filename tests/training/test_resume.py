"""Stopping and resuming: a SIGTERM writes a checkpoint, --resume continues it to the same weights
as an uninterrupted run; the data order does not depend on the number of workers; accumulation."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from helpers import SignalAt, assert_bitwise_equal, state_of, tiny_config
from vitlab.model import ConfigError
from vitlab.training import Interrupted, Trainer
from vitlab.training.checkpoint import latest_checkpoint
from vitlab.training.options import RunSpec
from vitlab.training.outputs import read_metrics

pytestmark = pytest.mark.integration

# 1437 digits / batch 64 = 22 steps an epoch: 30 steps cross an epoch boundary. EMA, Mixup/CutMix,
# RandAugment and stochastic depth all draw random numbers that a resumed run must reproduce.
RUN = {
    "data": {"batch_size": 64},
    "schedule": {"steps": 30},
    "optim": {"ema_decay": 0.9},
    "model": {"drop_path": 0.1, "dropout": 0.1},
}


def comparable(rows):
    return [{k: v for k, v in row.items() if k not in ("images_per_s", "wall_time_s")} for row in rows]


def test_resumed_run_equals_uninterrupted_run(tmp_path):
    whole_trainer = Trainer(tiny_config(tmp_path / "whole", **RUN))
    whole = whole_trainer.fit()

    out = tmp_path / "stopped"
    for stop, sig in ((7, signal.SIGTERM), (23, signal.SIGINT)):  # before the first evaluation; just after an epoch
        config = tiny_config(out, **RUN)
        config.run.resume = stop != 7
        with pytest.raises(Interrupted) as interrupted:
            Trainer(config, callbacks=[SignalAt(stop, sig)]).fit()
        assert interrupted.value.step == stop and interrupted.value.signal_name == signal.Signals(sig).name
        assert latest_checkpoint(out).name == f"step-{stop:08d}.pt"
    assert signal.getsignal(signal.SIGTERM) is not None  # handlers restored after each run

    config = tiny_config(out, **RUN)
    config.run.resume = True
    resumed = Trainer(config)
    assert (resumed.step, resumed.epoch, resumed.batch_in_epoch) == (23, 1, 1)
    result = resumed.fit()

    assert_bitwise_equal(state_of(whole_trainer.model), state_of(resumed.model))
    assert_bitwise_equal(state_of(whole.model), state_of(result.model))  # the EMA weights, which are saved
    assert_bitwise_equal(whole_trainer.optimizer.state_dict()["state"][0], resumed.optimizer.state_dict()["state"][0])
    assert comparable(read_metrics(out / "metrics.jsonl")) == comparable(
        read_metrics(tmp_path / "whole" / "metrics.jsonl")
    )
    assert result.summary["steps"] == 30 and result.summary["val_top1"] == whole.summary["val_top1"]


def test_resume_needs_the_same_settings(tmp_path):
    Trainer(tiny_config(tmp_path, schedule={"steps": 4}, run={"eval_every": 2})).fit()
    with pytest.raises(ConfigError, match="already holds a run .*pass --resume"):
        Trainer(tiny_config(tmp_path, schedule={"steps": 4}))
    changed = tiny_config(tmp_path, schedule={"steps": 4}, optim={"lr": 0.05}, data={"workers": 0})
    changed.run.resume = True
    with pytest.raises(ConfigError, match=r"--resume: .* other settings \(optim.lr: checkpoint 0.001, now 0.05\)"):
        Trainer(changed)


def test_resuming_a_finished_run_rewrites_its_outputs(tmp_path):
    first = Trainer(tiny_config(tmp_path, schedule={"steps": 4}, run={"eval_every": 2})).fit()
    (tmp_path / "summary.json").unlink()
    config = tiny_config(tmp_path, schedule={"steps": 4}, run={"eval_every": 2, "resume": True})
    again = Trainer(config).fit()
    assert again.summary["val_top1"] == first.summary["val_top1"] and (tmp_path / "summary.json").is_file()
    assert [row["step"] for row in read_metrics(tmp_path / "metrics.jsonl")] == [2, 4]


def test_workers_do_not_change_the_numbers(tmp_path):
    """Each sample's augmentation is seeded by (seed, epoch, index), not by a worker's generator."""
    results = [
        Trainer(tiny_config(tmp_path / str(workers), schedule={"steps": 6}, data={"workers": workers})).fit()
        for workers in (0, 2)
    ]
    assert_bitwise_equal(state_of(results[0].model), state_of(results[1].model))


def test_gradient_accumulation_matches_the_full_batch(tmp_path):
    """Two micro-batches of 16 give the step one batch of 32 gives (up to float rounding; SGD, because
    Adam would blow the rounding noise in gradients that are zero in exact arithmetic, such as the
    key bias's, up to full-size steps)."""
    runs = {}
    for accum in (1, 2):
        config = tiny_config(
            tmp_path / str(accum),
            recipe="demo",
            schedule={"steps": 5},
            optim={"grad_accum": accum, "name": "sgd", "lr": 0.05},
            model={"variant": "mu/4", "image_size": 8, "dim": None, "depth": None, "num_heads": None, "mlp_dim": None},
        )
        runs[accum] = Trainer(config).fit().model
    for name, tensor in runs[1].state_dict().items():
        torch.testing.assert_close(runs[2].state_dict()[name], tensor, rtol=1e-4, atol=1e-5, msg=name)


def test_a_signal_after_the_steps_stop_decision_is_taken_at_the_next_step(tmp_path, monkeypatch):
    """Under torchrun the processes get SIGTERM one after another, and a handler runs when the collective
    it interrupted returns: one may see it only after the step's stop decision. It must then stop at the
    next step with its checkpoint, never leave alone without one (the other would wait for it forever)."""
    original = RunSpec.checkpoint_due

    def signal_inside_the_checkpoint_decision(run, step, **when):
        if step == 5:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs before this returns
        return original(run, step, **when)

    monkeypatch.setattr(RunSpec, "checkpoint_due", signal_inside_the_checkpoint_decision)
    config = tiny_config(tmp_path, schedule={"steps": 8}, run={"eval_every": 100, "ckpt_every_steps": 100})
    with pytest.raises(Interrupted) as interrupted:
        Trainer(config).fit()
    assert interrupted.value.step == 6 and interrupted.value.signal_name == "SIGTERM"
    assert latest_checkpoint(tmp_path).name == "step-00000006.pt" == interrupted.value.checkpoint.name


def test_a_gap_run_from_before_the_default_changed_resumes_in_its_order(tmp_path):
    """A checkpoint written while GAP normalised after pooling by default has no model.gap_norm in its
    run config; its model_config records the order, and the same command resumes in it: the weights
    equal those of a resume that names the old order."""
    import shutil

    from vitlab.training.checkpoint import load_checkpoint, save_checkpoint

    old = {"model": {"pool": "gap", "gap_norm": "after_pool"}}  # what the default built then
    out = tmp_path / "unset"
    with pytest.raises(Interrupted):
        Trainer(tiny_config(out, **old), callbacks=[SignalAt(7)]).fit()
    state = load_checkpoint(latest_checkpoint(out))
    del state["config"]["model"]["gap_norm"]  # the field did not exist
    assert state["model_config"]["gap_norm"] == "after_pool"
    save_checkpoint(out, state["step"], state, keep=3)
    shutil.copytree(out, tmp_path / "named")

    resumed = {}
    for folder, model in (("named", old["model"]), ("unset", {"pool": "gap"})):  # unset: the same command as then
        config = tiny_config(tmp_path / folder, model=model)
        config.run.resume = True
        resumed[folder] = Trainer(config)
        assert resumed[folder].step == 7 and resumed[folder].model.config.gap_norm == "after_pool"
        resumed[folder].fit()
    assert_bitwise_equal(state_of(resumed["named"].model), state_of(resumed["unset"].model))
    fresh = Trainer(tiny_config(tmp_path / "new", model={"pool": "gap"}))
    assert fresh.model.config.gap_norm == "before_pool"  # a new run takes today's default
    fresh.close()
