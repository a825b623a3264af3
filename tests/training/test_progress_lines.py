"""Without a terminal, training reports by wall time as well as by step: a line at least every
`every_seconds`, a batch slower than that included, and one line estimating the run's length."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import pytest

from vitlab.training.callbacks import ProgressBar, duration

pytestmark = pytest.mark.unit


def fake_run(total_steps: int = 600) -> SimpleNamespace:
    config = SimpleNamespace(run=SimpleNamespace(log_every=50), data=SimpleNamespace(batch_size=64))
    return SimpleNamespace(config=config, step=0, total_steps=total_steps, lr=1e-3, images_per_second=5.5)


def test_a_batch_slower_than_the_interval_still_gets_lines(caplog):
    run, bar = fake_run(), ProgressBar(interactive=False, every_seconds=0.1)
    with caplog.at_level(logging.INFO, logger="vitlab"):
        bar.on_train_start(run)
        time.sleep(0.45)  # the first step, still under way
        bar.on_train_end(run, None)
    lines = [r.getMessage() for r in caplog.records if "under way" in r.getMessage()]
    assert len(lines) >= 2, caplog.text
    assert lines[0].startswith("step 0/600  step 1 under way for 0 s"), lines


def test_steps_between_log_every_are_reported_by_time(caplog):
    run, bar = fake_run(), ProgressBar(interactive=False, every_seconds=10.0)
    bar.start_time = bar.last_line = time.perf_counter() - 11  # no line for 11 s (no watcher started)
    with caplog.at_level(logging.INFO, logger="vitlab"):
        for step in (1, 2, 3):
            run.step = step
            if step == 3:
                bar.last_line -= 11
            bar.on_step_end(run, 2.3)
    assert [line.split()[1] for line in caplog.messages if line.startswith("step ")] == ["1/600", "3/600"]


def test_the_estimate_leaves_the_first_step_out_and_says_the_length(caplog):
    run, bar = fake_run(total_steps=602), ProgressBar(interactive=False)
    bar.start_time, bar.start_step, bar.first_step_seconds = 100.0, 0, 30.0  # step 1 took 30 s (warm-up)
    run.step = 3
    with caplog.at_level(logging.INFO, logger="vitlab"):
        bar._estimate(run, now=134.0)  # then 2 s a step
    # 599 steps left at 2 s: 19 min 58 s; 64 images in 2 s: 32 img/s
    assert caplog.messages == [
        "estimate: 602 steps of 64 images, ~19 min 58 s to go at 32.0 img/s (timed over 2 steps)"
    ]


def test_durations_read_as_people_say_them():
    assert [duration(s) for s in (12.4, 185, 9600)] == ["12 s", "3 min 5 s", "2 h 40 min"]
