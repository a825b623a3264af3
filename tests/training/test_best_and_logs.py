"""The best model by a chosen metric (DIR/best/), early stopping, and a resumed run deciding alike;
metrics.csv and TensorBoard event files holding every step; a finished run continued to a longer total."""

from __future__ import annotations

import json
import logging
import signal

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import vitlab
from helpers import SignalAt, tiny_config
from vitlab.model import ConfigError
from vitlab.training import Callback, Interrupted, Trainer, outputs
from vitlab.training.best import BestModel
from vitlab.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from vitlab.training.outputs import read_metrics, read_step_rows

# 12 steps, an evaluation every 2: early stopping with patience 2 on val_loss has room to act.
SHORT = {"schedule": {"steps": 12, "warmup_steps": 3}, "optim": {"lr": 0.02}}


class StepLog(Callback):
    """What the trainer reported at every step, to compare the logs with."""

    def __init__(self):
        self.rows = {}

    def on_step_end(self, trainer, loss):
        self.rows[trainer.step] = (loss, trainer.lr)


class CrashAt(Callback):
    """A crash after step `step`: what was logged after the last checkpoint stays behind."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, trainer, loss):
        if trainer.step == self.step:
            raise RuntimeError("crash")


def best_of(rows, metric):
    values = [row[metric] for row in rows]
    best = min(values) if metric == "val_loss" else max(values)
    return best, rows[values.index(best)]["step"]


@pytest.mark.integration
def test_best_folder_early_stop_and_a_resumed_run_deciding_alike(tmp_path):
    run = {"eval_every": 2, "keep_best_by": "val_top1", "early_stop_patience": 2}
    whole = Trainer(tiny_config(tmp_path / "whole", run=run, **SHORT)).fit()
    rows = read_metrics(tmp_path / "whole" / "metrics.jsonl")
    value, step = best_of(rows, "val_top1")
    summary = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert (summary["best_by"], summary["best_value"], summary["best_step"]) == (
        "val_top1",
        value,
        step,
    )
    # Stopped after two evaluations without a better top-1, before the 12 steps.
    stopped = summary.get("stopped_early_at_step")
    assert stopped == step + 4 < 12 and summary["steps"] == stopped == rows[-1]["step"]
    assert summary["val_top1"] == rows[-1]["val_top1"]  # DIR itself: the last model
    best_summary = json.loads((tmp_path / "whole" / "best" / "summary.json").read_text())
    assert (best_summary["step"], best_summary["val_top1"]) == (step, value)
    best = vitlab.load(tmp_path / "whole" / "best")
    assert best.config.class_names == whole.model.config.class_names
    assert vitlab.load(tmp_path / "whole").state_dict()["head.weight"].ne(best.state_dict()["head.weight"]).any()

    # Interrupted after the best evaluation: the resumed run must carry the best value and the count.
    out = tmp_path / "resumed"
    with pytest.raises(Interrupted):
        Trainer(
            tiny_config(out, run=run, **SHORT),
            callbacks=[SignalAt(step + 2, signal.SIGTERM)],
        ).fit()
    resumed = Trainer(tiny_config(out, run={**run, "resume": True}, **SHORT)).fit()
    assert {k: resumed.summary[k] for k in ("best_value", "best_step", "stopped_early_at_step", "steps")} == {
        k: summary[k] for k in ("best_value", "best_step", "stopped_early_at_step", "steps")
    }


@pytest.mark.integration
def test_kept_best_weights_are_the_best_folders_and_survive_a_resume(tmp_path):
    """One tracker for run.keep_best and run.keep_best_by: DIR ends with the weights DIR/best/ holds, and
    the kept weights are checkpoint state, so a run stopped after its best evaluation ends with them."""
    run = {"eval_every": 2, "keep_best": True, "keep_best_by": "val_top1"}
    whole = Trainer(tiny_config(tmp_path / "whole", run=run, **SHORT)).fit()
    value, step = best_of(read_metrics(tmp_path / "whole" / "metrics.jsonl"), "val_top1")
    assert whole.summary["best_step"] == step < 10 and whole.summary["val_top1"] == value  # room to stop after it
    kept = vitlab.load(tmp_path / "whole").state_dict()
    assert all(
        torch.equal(kept[name], tensor)
        for name, tensor in vitlab.load(tmp_path / "whole" / "best").state_dict().items()
    )

    out = tmp_path / "resumed"
    with pytest.raises(Interrupted):
        Trainer(tiny_config(out, run=run, **SHORT), callbacks=[SignalAt(step + 1, signal.SIGTERM)]).fit()
    resumed = Trainer(tiny_config(out, run={**run, "resume": True}, **SHORT)).fit()
    assert resumed.summary["best_step"] == step
    assert all(torch.equal(kept[name], tensor) for name, tensor in vitlab.load(out).state_dict().items())


@pytest.mark.integration
def test_a_checkpoint_keeping_best_weights_the_earlier_way_resumes_and_says_so(tmp_path, caplog):
    run = {"eval_every": 2, "keep_best": True}
    with pytest.raises(Interrupted):
        Trainer(tiny_config(tmp_path, run=run, **SHORT), callbacks=[SignalAt(3)]).fit()
    state = load_checkpoint(latest_checkpoint(tmp_path))
    state["best"] = {"top1": 0.5, "step": 2, "weights": state["model"]}  # the entry BestWeights wrote
    save_checkpoint(tmp_path, state["step"], state, keep=3)
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        Trainer(tiny_config(tmp_path, run={**run, "resume": True}, **SHORT)).fit()
    assert sum("earlier layout and are not restored" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.integration
def test_csv_and_tensorboard_hold_every_step_once_across_a_resume(tmp_path, monkeypatch):
    drawn = {}
    plot = outputs.plot_training_curve
    monkeypatch.setattr(outputs, "plot_training_curve", lambda *a, **k: drawn.update(k) or plot(*a, **k))
    out, steps = tmp_path / "run", StepLog()
    config = tiny_config(
        out,
        run={"eval_every": 3, "tensorboard": True},
        schedule={"steps": 6, "warmup_steps": 2},
    )
    with pytest.raises(RuntimeError, match="crash"):
        # checkpoint at 3 (the evaluation); steps 4 and 5 logged, then lost
        Trainer(config, callbacks=[CrashAt(5)]).fit()
    config.run.resume = True
    Trainer(config, callbacks=[steps]).fit()
    rows = read_step_rows(out)
    assert [row["step"] for row in rows] == [1, 2, 3, 4, 5, 6]
    assert [(row["loss"], row["lr"]) for row in rows[3:]] == [steps.rows[s] for s in (4, 5, 6)]
    assert drawn["step_rows"] == rows  # the figure's loss and rate: every step
    # warm-up, then cosine: 5 rates in 6 steps (the peak twice)
    assert len({row["lr"] for row in rows}) == 5
    evaluations = {row["step"]: row for row in read_metrics(out / "metrics.jsonl")}
    assert [row["step"] for row in rows if row["val_top1"] is not None] == [3, 6] == list(evaluations)
    assert all(
        row[key] == evaluations[row["step"]][key]
        for row in rows
        if row["step"] in evaluations
        for key in ("val_top1", "val_top5", "val_loss")
    )

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    losses = events.Scalars("train/loss")
    # the first session's steps past 3 were purged: none twice; the values float32
    assert [e.step for e in losses] == [1, 2, 3, 4, 5, 6]
    assert [e.value for e in losses] == pytest.approx([row["loss"] for row in rows], rel=1e-6)
    assert [e.value for e in events.Scalars("train/lr")] == pytest.approx([row["lr"] for row in rows], rel=1e-6)
    assert [e.value for e in events.Scalars("val/top1")] == pytest.approx([evaluations[s]["val_top1"] for s in (3, 6)])


@pytest.mark.integration
def test_a_finished_run_continues_to_a_longer_total(tmp_path, caplog):
    config = tiny_config(tmp_path, run={"eval_every": 2}, schedule={"steps": 2, "warmup_steps": 1})
    Trainer(config).fit()
    longer = tiny_config(
        tmp_path,
        run={"eval_every": 2, "resume": True},
        schedule={"steps": 4, "warmup_steps": 1},
    )
    steps = StepLog()
    with caplog.at_level(logging.INFO, logger="vitlab"):
        result = Trainer(longer, callbacks=[steps]).fit()
    assert list(steps.rows) == [3, 4] and result.summary["steps"] == 4
    assert sum("schedule.steps 2 -> 4" in r.getMessage() for r in caplog.records) == 1
    # the rate at step 3 comes from the 4-step cosine, not the ended 2-step one
    assert steps.rows[3][1] > 0.0
    assert [row["step"] for row in read_metrics(tmp_path / "metrics.jsonl")] == [2, 4]


@pytest.mark.integration
@pytest.mark.fault("bad-config", kinds=2)
def test_continuing_refuses_a_shorter_total_and_other_changes(tmp_path):
    Trainer(tiny_config(tmp_path, run={"eval_every": 2}, schedule={"steps": 4})).fit()
    shorter = tiny_config(tmp_path, run={"resume": True}, schedule={"steps": 2})
    with pytest.raises(ConfigError, match=r"schedule.steps: checkpoint 4, now 2"):
        Trainer(shorter)
    other = tiny_config(tmp_path, run={"resume": True}, schedule={"steps": 8}, optim={"lr": 0.05})
    with pytest.raises(ConfigError, match=r"optim.lr: checkpoint 0.001, now 0.05"):
        Trainer(other)


@pytest.mark.unit
def test_kept_best_weights_follow_the_chosen_metric():
    best, model = BestModel("unused", "val_loss", keep=True), torch.nn.Linear(2, 1)
    for step, loss in [(1, 2.0), (2, 1.5), (3, 1.7), (4, 1.5)]:
        best.update(step, loss, model)
    assert (best.step, best.value) == (
        2,
        1.5,
    )  # the lowest loss; an equal one later does not replace it
