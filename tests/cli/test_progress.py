"""Progress bars only on a terminal (and never with --no-progress); library use logs through `logging`,
to stderr when the program has configured no logging of its own, and only through its handlers if it has."""

from __future__ import annotations

import logging
import sys

import numpy as np
import pytest
from PIL import Image

import vitlab
from helpers import randomise_, tiny_config
from vitlab.cli import main
from vitlab.logs import FallbackHandler, ensure_handler
from vitlab.model import create_untrained


@pytest.mark.integration
def test_bars_only_on_a_terminal_and_never_with_no_progress(tmp_path, capsys, monkeypatch):
    options = {
        "image_size": 8,
        "depth": 1,
        "dim": 16,
        "num_heads": 2,
        "mlp_dim": 32,
        "num_classes": 3,
    }
    randomise_(create_untrained("Ti/4", **options)).save_pretrained(tmp_path / "model")
    rng = np.random.default_rng(0)
    for index in range(3):
        pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(tmp_path / f"{index}.png")
    ckpt = str(tmp_path / "model")
    argv = [
        "predict",
        "--ckpt",
        ckpt,
        str(tmp_path),
        "--batch-size",
        "1",
        "--device",
        "cpu",
    ]
    assert main(argv) == 0
    # stderr is not a terminal: no bar
    assert "predict:" not in capsys.readouterr().err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(argv) == 0
    # one step per batch of one
    assert "predict:" in capsys.readouterr().err.replace("\r", "\n")
    assert main(["--no-progress", *argv]) == 0
    assert "predict:" not in capsys.readouterr().err


@pytest.fixture
def unconfigure(monkeypatch):
    """Makes this a program that configured no logging: no handler on the root or on "vitlab".

    Called in the test itself: pytest adds its capturing handlers to the root as the test starts.
    """
    logger = logging.getLogger("vitlab")
    level = logger.level

    def apply() -> logging.Logger:
        monkeypatch.setattr(logging.getLogger(), "handlers", [])
        monkeypatch.setattr(logger, "handlers", [])
        logger.setLevel(logging.NOTSET)
        return logger

    yield apply
    # setLevel, not the attribute: it also clears the loggers' caches
    logger.setLevel(level)


@pytest.mark.integration
def test_library_training_reports_to_stderr_without_logging_configured(tmp_path, capsys, unconfigure):
    logger = unconfigure()
    vitlab.train(tiny_config(tmp_path / "run"))
    err = capsys.readouterr().err
    # the trainer's log lines, off a terminal
    assert "step 10/20" in err and "val top-1" in err
    assert [type(h) for h in logger.handlers] == [FallbackHandler]
    ensure_handler()
    assert len(logger.handlers) == 1  # installed once


@pytest.mark.unit
def test_a_program_that_configures_logging_gets_each_line_once(capsys, unconfigure):
    logger = unconfigure()
    ensure_handler()
    root = logging.getLogger()
    mine = logging.StreamHandler(sys.stdout)
    root.addHandler(mine)  # configured after the first vitlab call
    try:
        logger.info("one line")
    finally:
        root.removeHandler(mine)
    captured = capsys.readouterr()
    assert captured.out == "one line\n" and captured.err == ""
    logger.handlers.clear()
    root.addHandler(mine)  # configured before: nothing installed at all
    try:
        ensure_handler()
        assert logger.handlers == []
    finally:
        root.removeHandler(mine)


@pytest.mark.unit
def test_the_training_bar_follows_no_progress_too(monkeypatch):
    from vitlab.progress import disable_progress
    from vitlab.training.callbacks import ProgressBar

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    disable_progress(False)  # as a process starts (an earlier `vitlab --no-progress` call may have set it)
    assert ProgressBar().interactive
    disable_progress()
    try:
        assert not ProgressBar().interactive  # a log line every run.log_every steps instead of a bar
    finally:
        disable_progress(False)
    assert ProgressBar(interactive=True).interactive  # an explicit choice stands
