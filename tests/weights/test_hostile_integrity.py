"""Wrong data that loaded without a word: a model folder whose weights are integers, and config files
that give a key twice (YAML and JSON keep the last value). Each is now one line naming the file."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

import vitlab
from helpers import one_line_error, randomise_
from vitlab.model import ViTConfig
from vitlab.weights import CheckpointError

pytestmark = pytest.mark.unit

TINY = ViTConfig(image_size=16, patch_size=8, dim=16, depth=1, num_heads=2, mlp_dim=32, num_classes=3)


@pytest.fixture
def folder(tmp_path):
    return vitlab.save_pretrained(randomise_(vitlab.create_model(TINY)), tmp_path / "model")


@pytest.mark.fault("hostile-input", kinds=1)
def test_a_folder_of_integer_weights_is_refused_by_name(folder):
    state = vitlab.load(folder).state_dict()
    save_file({key: (value * 10).to(torch.int32) for key, value in state.items()}, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"weights must be floating point; \d+ tensors are not: .*\(int32\)"):
        vitlab.load(folder)


@pytest.mark.fault("hostile-input", kinds=2)
def test_a_key_given_twice_in_a_config_file_is_one_line(folder, tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text("optim:\n  lr: 0.1\n  weight_decay: 0.0\n  lr: 0.001\n")
    argv = ["train", "--data", "digits", "--steps", "1", "--out", str(tmp_path / "run"), "--config", str(config)]
    line = one_line_error(capsys, argv)
    assert f"{config}: not valid YAML (line 4: key 'lr' appears twice)" in line, line

    text = (folder / "config.json").read_text()
    assert '"num_classes": 3' in text
    (folder / "config.json").write_text(text.replace('"num_classes": 3', '"num_classes": 3, "num_classes": 5', 1))
    with pytest.raises(CheckpointError, match="config.json: not valid JSON .*key 'num_classes' appears twice"):
        vitlab.load(folder)
