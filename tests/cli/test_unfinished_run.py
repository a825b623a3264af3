"""A run stopped before its end is usable: predict, eval and export take its folder (and a checkpoint
file of it) as the newest intact checkpoint's model, and log the step they used."""

from __future__ import annotations

import logging
import signal

import pytest

import vitlab
from helpers import SignalAt, record_hub_calls, tiny_config, write_class_folders
from vitlab.cli import main
from vitlab.training import Interrupted, Trainer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("stopped") / "run"
    with pytest.raises(Interrupted):
        Trainer(tiny_config(out, run={"ckpt_every_steps": 2}), callbacks=[SignalAt(7, signal.SIGTERM)]).fit()
    assert not (out / "config.json").exists()  # no model folder: the run did not finish
    return out


@pytest.mark.parametrize("command", ["predict", "eval", "export"])
def test_a_stopped_run_folder_serves_its_newest_checkpoint(stopped_run, tmp_path, command, caplog):
    image = write_class_folders(tmp_path / "images", {"a": 1})[0]
    argv = {
        "predict": ["predict", "--ckpt", str(stopped_run), str(image)],
        "eval": ["eval", "--ckpt", str(stopped_run), "--out", str(tmp_path / "eval.json")],
        "export": ["export", "--ckpt", str(stopped_run), "--format", "npz", "--out", str(tmp_path / "model.npz")],
    }[command]
    with caplog.at_level(logging.INFO, logger="vitlab"):
        assert main(argv) == 0
    used = [m for m in caplog.messages if "an unfinished run" in m]
    assert used == [
        f"{stopped_run}: an unfinished run; using checkpoint step-00000007.pt, step 7 (of a run of 20 steps)"
    ]


def test_a_checkpoint_file_of_the_run_loads_too(stopped_run, tmp_path, caplog):
    image = write_class_folders(tmp_path / "images", {"a": 1})[0]
    older = stopped_run / "checkpoints" / "step-00000006.pt"
    with caplog.at_level(logging.INFO, logger="vitlab"):
        assert main(["predict", "--ckpt", str(older), str(image)]) == 0
    assert any(m.endswith("using checkpoint step-00000006.pt, step 6 (of a run of 20 steps)") for m in caplog.messages)


def test_finetune_from_a_stopped_run_trains_at_its_image_size(stopped_run, tmp_path, caplog):
    out = tmp_path / "tuned"
    argv = ["finetune", "--ckpt", str(stopped_run), "--data", "digits", "--steps", "1", "--threads", "1"]
    with caplog.at_level(logging.INFO, logger="vitlab"):
        assert main([*argv, "--out", str(out)]) == 0
    assert any("using checkpoint step-00000007.pt" in m for m in caplog.messages)
    assert vitlab.load(out).config.image_size == (8, 8)  # the stopped run's (tiny_config), not 384


def test_a_paper_scale_finetune_refused_by_memory_names_the_image_size(stopped_run, tmp_path, capsys):
    argv = ["finetune", "--ckpt", str(stopped_run), "--data", "digits", "--recipe", "paper-finetune:pets"]
    assert main([*argv, "--set", "run.memory_limit=4", "--out", str(tmp_path / "tuned")]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--image-size 384 (model.image_size of paper-finetune:pets, unless given) resamples" in line, line


def test_push_uploads_a_stopped_runs_newest_checkpoint(stopped_run, tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("VITLAB_OFFLINE", raising=False)
    calls = record_hub_calls(monkeypatch, tmp_path)  # no network: HfApi's calls are recorded
    with caplog.at_level(logging.INFO, logger="vitlab"):
        assert main(["push", str(stopped_run), "vitlab-test/stopped"]) == 0
    assert any(m.endswith("using checkpoint step-00000007.pt, step 7 (of a run of 20 steps)") for m in caplog.messages)
    upload = calls[-1]
    assert upload.name == "upload_folder" and upload.arguments["repo_id"] == "vitlab-test/stopped"
    assert sorted(path.name for path in upload.copy.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert vitlab.load(upload.copy).config.image_size == (8, 8)
