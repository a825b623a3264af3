"""Pushing to the Hugging Face Hub with a recorded HfApi (no network): the calls, their options, the
files uploaded with the model card, and the one-line refusals before anything is written."""

from __future__ import annotations

import pytest
import torch
from huggingface_hub import ModelCard

import vitlab
from helpers import randomise_, record_hub_calls
from vitlab.cli import main
from vitlab.errors import InputError
from vitlab.model import ViTConfig

pytestmark = pytest.mark.unit

SUMMARY = {"val_top1": 0.875, "data": "digits", "steps": 40, "recipe": "demo"}
UPLOADED = ["README.md", "config.json", "model.safetensors"]


def tiny_model() -> vitlab.VisionTransformer:
    config = ViTConfig(image_size=16, patch_size=8, dim=16, depth=1, num_heads=2, mlp_dim=32, num_classes=3)
    return randomise_(vitlab.create_model(config.replace(name="Ti/8-push"))).eval()


def batch() -> torch.Tensor:
    return torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(5))


@pytest.fixture
def online(monkeypatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("VITLAB_OFFLINE", raising=False)


def test_model_push_to_hub_creates_the_repo_and_uploads_the_folder_with_its_card(tmp_path, monkeypatch, online):
    calls = record_hub_calls(monkeypatch, tmp_path)
    model = tiny_model()
    url = model.push_to_hub("vitlab-test/tiny", private=True, revision="v1", commit_message="First upload")

    assert url == "https://huggingface.co/vitlab-test/tiny/commit/0123abcd"
    assert [call.name for call in calls] == ["HfApi", "create_repo", "create_branch", "upload_folder"]
    assert calls[0].arguments["library_name"] == "vitlab"
    assert calls[1].arguments == {"repo_id": "vitlab-test/tiny", "private": True, "exist_ok": True}
    assert calls[2].arguments == {"repo_id": "vitlab-test/tiny", "branch": "v1", "exist_ok": True}
    upload = calls[3]
    assert {key: upload.arguments[key] for key in ("repo_id", "revision", "commit_message")} == {
        "repo_id": "vitlab-test/tiny",
        "revision": "v1",
        "commit_message": "First upload",
    }
    assert sorted(path.name for path in upload.copy.iterdir()) == UPLOADED
    card = ModelCard.load(upload.copy / "README.md")
    assert (
        card.data.library_name == "vitlab"
        and 'vitlab.load("hf://vitlab-test/tiny")  # this Hub repository' in card.text
    )
    with torch.no_grad():
        assert torch.equal(vitlab.load(upload.copy)(batch()), model(batch()))


def test_a_finished_run_folder_is_pushed_with_its_training_summary_in_the_card(tmp_path, monkeypatch, online):
    calls = record_hub_calls(monkeypatch, tmp_path)
    run = vitlab.save_pretrained(tiny_model(), tmp_path / "run", training=SUMMARY)
    vitlab.push_to_hub(run, "vitlab-test/run")

    assert [call.name for call in calls] == ["HfApi", "create_repo", "upload_folder"]  # no branch for main
    assert calls[1].arguments["private"] is None  # the Hub's default; an existing repository keeps its own
    upload = calls[2]
    assert upload.arguments["revision"] is None and upload.arguments["commit_message"] == "Upload Ti/8-push with vitlab"
    card = ModelCard.load(upload.copy / "README.md")
    assert card.data.eval_results[0].metric_value == 0.875 and "## Training" in card.text


@pytest.mark.parametrize(
    "repo_id, reason",
    [
        ("org/name/extra", "Repo id must be in the form 'repo_name' or 'namespace/repo_name'"),
        ("org/bad--name", "Cannot have -- or .. in repo_id"),
        ("", "Repo id must use alphanumeric chars"),
    ],
)
def test_a_bad_repo_id_is_one_line_before_anything_is_loaded_or_written(tmp_path, monkeypatch, online, repo_id, reason):
    calls = record_hub_calls(monkeypatch, tmp_path)
    monkeypatch.setattr("vitlab.training.push.load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(InputError, match=f"^'{repo_id}' is not a Hub repository id \\({reason}") as error:
        vitlab.push_to_hub(tmp_path / "run", repo_id)
    assert "\n" not in str(error.value) and calls == [] and sorted(tmp_path.iterdir()) == []


def test_offline_push_is_refused_in_one_line_before_anything_is_written(tmp_path, monkeypatch):
    calls = record_hub_calls(monkeypatch, tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputError, match="^vitlab-test/tiny: pushing to the Hub needs the network"):
        tiny_model().push_to_hub("vitlab-test/tiny")
    assert calls == []


def test_push_command_passes_its_options_and_prints_the_commit(tmp_path, monkeypatch, online, capsys):
    calls = record_hub_calls(monkeypatch, tmp_path)
    run = vitlab.save_pretrained(tiny_model(), tmp_path / "run", training=SUMMARY)
    argv = ["push", str(run), "vitlab-test/run", "--private", "--revision", "v2", "--commit-message", "Run 2"]
    assert main(argv) == 0
    assert (
        capsys.readouterr().out
        == f"pushed {run} to vitlab-test/run: https://huggingface.co/vitlab-test/run/commit/0123abcd\n"
    )
    assert calls[1].arguments["private"] is True and calls[2].arguments["branch"] == "v2"
    assert calls[3].arguments["commit_message"] == "Run 2"

    assert main(["push", str(run), "not/a/repo"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0 and len(calls) == 4
