"""vitlab.figures.save_figure, which every plot goes through, and the model card beside it: names that
are not UTF-8 (a data folder, an image file) are drawn and written, never the end of a finished run."""

from __future__ import annotations

import os

import matplotlib
import pytest

from helpers import tiny_config, write_class_folders
from vitlab.figures import save_figure
from vitlab.training import Trainer

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402 - after the backend is chosen

ODD = os.fsdecode(b"caf\xe9")  # as os.listdir gives a Latin-1 name: a surrogate for the byte \xe9


@pytest.mark.unit
def test_a_name_that_is_not_utf8_is_drawn_with_a_replacement_character(tmp_path):
    figure = Figure()
    axis = figure.add_subplot()
    axis.set_title(f"images of {ODD}")
    axis.set_ylabel("plain")
    path = save_figure(figure, tmp_path / "deep" / "plot.png", dpi=50)
    assert path.read_bytes().startswith(b"\x89PNG") and axis.get_title() == "images of caf\ufffd"
    assert axis.get_ylabel() == "plain"


@pytest.mark.unit
def test_the_unchanged_text_is_what_matplotlib_refuses(tmp_path):  # what save_figure is there for
    figure = Figure()
    figure.add_subplot().set_title(ODD)
    with pytest.raises((TypeError, UnicodeEncodeError, ValueError)):
        figure.savefig(tmp_path / "plot.png")


@pytest.mark.integration
def test_a_run_on_a_data_folder_whose_name_is_not_utf8_finishes(tmp_path):
    source = tmp_path / ODD
    write_class_folders(source, {"cat": 10, "dog": 10})
    config = tiny_config(
        tmp_path / "run", data={"source": str(source), "batch_size": 8}, schedule={"steps": 2}, run={"eval_every": 2}
    )
    result = Trainer(config).fit()
    card = (tmp_path / "run" / "README.md").read_bytes().decode("utf-8")  # still UTF-8, the name escaped
    assert "caf\\udce9" in card and result.summary is not None
    assert (tmp_path / "run" / "training_curve.png").is_file()
