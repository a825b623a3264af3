"""Option values that used to fail late or not at all: a seed beyond 64 bits, a NaN ridge penalty,
infinite or NaN serve limits and memory limits, ten thousand workers. Each is refused in one line
naming the flag and its rule when the command line is parsed, before any model or data is touched."""

from __future__ import annotations

import os

import pytest

from helpers import one_line_error
from vitlab.config_fields import workers_range

pytestmark = pytest.mark.unit

HUGE = str(10**23)
CPUS = len(os.sched_getaffinity(0))
BOUND = max(8, 4 * CPUS)


@pytest.mark.fault("hostile-input", kinds=1)  # one per parameter
@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--data", "digits", "--seed", HUGE], f"run.seed={HUGE}: must be in [0, 9223372036854775807]"),
        (
            ["eval", "--ckpt", "m", "--data", "digits", "--seed", HUGE],
            "argument --seed: must be in [0, 9223372036854775807]",
        ),
        (
            ["data", "fractaldb", "--classes", "1", "--per-class", "1", "--size", "8", "--out", "x", "--seed", "-1"],
            "argument --seed: must be in",
        ),
        (
            ["fewshot", "--ckpt", "m", "--data", "digits", "--l2", "nan"],
            "argument --l2: must be >= 0 and finite, got nan",
        ),
        (
            ["serve", "--ckpt", "m", "--max-megapixels", "inf"],
            "argument --max-megapixels: must be > 0 and finite, got inf",
        ),
        (
            ["serve", "--ckpt", "m", "--max-upload-mb", "nan"],
            "argument --max-upload-mb: must be > 0 and finite, got nan",
        ),
        (
            ["predict", "--ckpt", "m", "x.png", "--memory-limit", "inf"],
            "argument --memory-limit: must be > 0 and finite",
        ),
        (
            ["train", "--data", "digits", "--workers", "10000"],
            f"data.workers=10000: must be in [0, {BOUND}] worker processes",
        ),
        (
            ["predict", "--ckpt", "m", "x.png", "--workers", "10000"],
            f"argument --workers: must be in [0, {BOUND}] worker",
        ),
        (["eval", "--ckpt", "m", "--data", "digits", "--workers", "10000"], f"must be in [0, {BOUND}]"),
        (["fewshot", "--ckpt", "m", "--data", "digits", "--workers", "10000"], f"must be in [0, {BOUND}]"),
        (["analyze", "--ckpt", "m", "--data", "digits", "--workers", "10000"], f"must be in [0, {BOUND}]"),
    ],
    ids=lambda value: value[0] if isinstance(value, list) else None,
)
def test_an_option_value_out_of_range_is_one_line_at_parse_time(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)  # nothing named exists here: a check after parsing would name the missing file
    line = one_line_error(capsys, argv)
    assert message in line, line


def test_the_workers_bound_follows_the_cpus_this_process_may_use(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    assert workers_range().high == 256 and "of the 64 this process may use" in workers_range().rule()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert workers_range().high == 8


@pytest.mark.fault("hostile-input", kinds=1)
def test_a_deleted_working_directory_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    """Deleted under the shell, it made torch's libraries fail to load ("Intel oneMKL FATAL ERROR")."""
    from vitlab.cli import main

    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert main(["models"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the working directory no longer exists" in err, err
