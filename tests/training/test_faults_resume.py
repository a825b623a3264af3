"""Resuming (issue 6): a resume checkpoint that does not fit the run, or is not a checkpoint at all, is
one CheckpointError naming the file, and no code in it runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers import MarkerPayload, tiny_config
from vitlab.model import ConfigError
from vitlab.training import Trainer
from vitlab.training import atomic_files as files
from vitlab.training import checkpoint as ckpt
from vitlab.weights import CheckpointError

pytestmark = pytest.mark.integration


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
    return r"refused to unpickle: it names io\.open, which could run code"


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


@pytest.mark.parametrize(
    "corrupt", [corrupt_truncated, corrupt_with_code, corrupt_foreign, corrupt_shapes, corrupt_missing_entry]
)
def test_a_bad_resume_checkpoint_is_one_error_naming_the_file(tmp_path, corrupt):
    Trainer(tiny_config(tmp_path, schedule={"steps": 3})).fit()
    path = ckpt.latest_checkpoint(tmp_path)
    match = corrupt(path)
    files.record_checksums(path)  # as if it had been written so: the checks after the checksum's are tried
    with pytest.raises(CheckpointError, match=match) as caught:
        Trainer(tiny_config(tmp_path, schedule={"steps": 3}, run={"resume": True}))
    assert str(path.parent) in str(caught.value) and "\n" not in str(caught.value)
    assert not (path.parent / "pwned").exists()  # the pickled code never ran


@pytest.mark.fault("checkpoints", kinds=2)
def test_a_resume_over_other_images_is_refused_and_over_the_same_ones_goes_on(tmp_path):
    from helpers import write_class_folders

    data = tmp_path / "data"
    write_class_folders(data, {"cat": 10, "dog": 10})
    run = tmp_path / "run"

    def config(steps: int, resume: bool):
        sections = dict(data={"source": str(data), "batch_size": 4}, run={"resume": resume, "eval_every": 2})
        return tiny_config(run, schedule={"steps": steps, "warmup_steps": 1}, **sections)

    Trainer(config(2, False)).fit()
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(run))
    assert state["data"]["train"].startswith("16 images, sha256 ")  # 20, less the validation fifth
    (data / "cat" / "00000.png").rename(data / "dog" / "moved.png")  # relabelled: the same count, other labels
    with pytest.raises(
        ConfigError, match=r"--resume: the (train|val) split of data\.source=.* is not the checkpoint's"
    ):
        Trainer(config(4, True))
    (data / "dog" / "moved.png").rename(data / "cat" / "00000.png")
    assert Trainer(config(4, True)).fit().summary is not None
