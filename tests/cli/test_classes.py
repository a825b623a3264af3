"""The model's outputs against the data's classes (vitlab.training.run_evaluation.check_classes, used by eval and analyze):
names that differ are refused, ImageNet-1k's names meet an ImageNet folder's WordNet IDs by position,
and a model without names is scored by position with the assumption said, or refused where the data
has classes it has no output for."""

from __future__ import annotations

import importlib.resources
import logging

import numpy as np
import pytest
from PIL import Image

from helpers import one_line_error, randomise_
from vitlab.model import ViTConfig, create_untrained
from vitlab.training.run_evaluation import check_classes
from vitlab.weights.pretrained import imagenet_class_names, imagenet_folders

pytestmark = pytest.mark.unit


def timm_imagenet_synsets() -> list[str]:
    """ImageNet-1k's WordNet IDs as timm ships them: the source named beside IMAGENET_WNIDS_SHA256."""
    pytest.importorskip("timm")
    return (importlib.resources.files("timm.data") / "_info" / "imagenet_synsets.txt").read_text().split()


def imagenet_model() -> ViTConfig:
    return ViTConfig(num_classes=1000, class_names=imagenet_class_names())


def test_an_imagenet_folder_of_wordnet_ids_meets_the_imagenet_names_by_position(caplog):
    wnids = timm_imagenet_synsets()
    assert imagenet_folders(wnids)
    with caplog.at_level(logging.INFO, logger="vitlab"):
        check_classes(imagenet_model(), wnids, "B/16:x", "imagefolder:VAL")
    assert "imagefolder:VAL's classes are ImageNet-1k's WordNet IDs, in the order of B/16:x's classes" in caplog.text


@pytest.mark.fault("bad-input", kinds=3)
def test_other_class_folders_beside_imagenet_names_are_refused():
    wnids = timm_imagenet_synsets()
    swapped = [wnids[1], wnids[0], *wnids[2:]]  # two classes out of order: every score of theirs wrong
    for folders in (swapped, wnids[:999], [*wnids[:999], "n99999999"]):
        assert not imagenet_folders(folders)
        with pytest.raises(ValueError, match=r"B/16:x was trained on classes \[tench, goldfish, .*\] \(1000\)"):
            check_classes(imagenet_model(), folders, "B/16:x", "VAL")
    other = ViTConfig(num_classes=1000, class_names=[f"c{k}" for k in range(1000)])
    with pytest.raises(ValueError, match="was trained on classes"):  # only ImageNet-1k's names meet them
        check_classes(other, wnids, "m", "VAL")


def test_a_model_without_names_is_scored_by_position_and_says_so(caplog):
    with caplog.at_level(logging.INFO, logger="vitlab"):
        check_classes(ViTConfig(num_classes=5), ["a", "b", "c"], "m.npz", "DIR")
    assert (
        "m.npz records no class names: output k is taken as DIR's k-th class, [a, b, c] (3) in order; "
        "a prediction among its 2 outputs past them counts as wrong" in caplog.text
    )


@pytest.mark.fault("bad-input", kinds=1)
def test_eval_of_a_model_with_fewer_outputs_than_classes_is_one_line(tmp_path, capsys):
    model = tmp_path / "model"
    options = dict(image_size=16, depth=1, dim=16, num_heads=2, mlp_dim=32, num_classes=2)
    randomise_(create_untrained("Ti/4", **options)).save_pretrained(model)
    rng = np.random.default_rng(0)
    for name in "abc":
        (tmp_path / "data" / name).mkdir(parents=True)
        for index in range(5):
            image = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
            Image.fromarray(image).save(tmp_path / "data" / name / f"{index}.png")
    line = one_line_error(capsys, ["eval", "--ckpt", str(model), "--data", str(tmp_path / "data"), "--device", "cpu"])
    assert "has 2 outputs and records no class names, but" in line and "'c' and those after it cannot be scored" in line
