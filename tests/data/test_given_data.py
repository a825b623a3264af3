"""Data given as objects: `vitlab.train(dataset=...)` with a torch Dataset, and `--data hf:NAME[:SPLIT]`
with a Hugging Face `datasets` dataset saved to disk (no download)."""

from __future__ import annotations

import logging
import sys

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

import vitlab
from helpers import TINY_FLAGS, tiny_config
from vitlab.cli import main
from vitlab.data import load_datasets
from vitlab.data.given import as_rgb, given_splits
from vitlab.data.splits import SplitPlan

datasets = pytest.importorskip("datasets")

NAMES = ["zero", "one", "two"]


class Stripes(torch.utils.data.Dataset):
    """Three classes of 8 x 8 images: stripes of a class's own orientation, float tensors in 0..1."""

    classes = NAMES

    def __init__(self, count: int = 60, as_pil: bool = False) -> None:
        self.count, self.as_pil = count, as_pil

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int):
        label = index % 3
        grid = torch.arange(8.0)
        pattern = [grid[:, None].expand(8, 8), grid[None, :].expand(8, 8), (grid[:, None] + grid[None, :]) / 2][label]
        image = ((pattern + index).floor() % 4 / 3).expand(3, 8, 8)
        if self.as_pil:
            return Image.fromarray((image * 255).byte().permute(1, 2, 0).numpy()), label
        return image, label


def striped_hf(count: int = 60) -> datasets.Dataset:
    stripes = Stripes(count, as_pil=True)
    features = datasets.Features(
        {"picture": datasets.Image(), "kind": datasets.ClassLabel(names=NAMES), "note": datasets.Value("string")}
    )
    rows = [stripes[i] for i in range(count)]
    columns = {"picture": [r[0] for r in rows], "kind": [r[1] for r in rows], "note": ["n"] * count}
    return datasets.Dataset.from_dict(columns, features=features)


@pytest.fixture(autouse=True)
def hf_cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


# -- torch Datasets -------------------------------------------------------------------------------
@pytest.mark.unit
def test_a_dataset_of_tensors_splits_stratified_with_its_class_names():
    splits = given_splits(Stripes(60), None, None, None, plan=SplitPlan(val_fraction=0.2, seed=0))
    assert splits.class_names == NAMES and (len(splits.train), len(splits.val)) == (48, 12)
    assert np.bincount(splits.val.labels).tolist() == [4, 4, 4] and splits.held_out
    image, label = splits.train[0]
    assert isinstance(image, Image.Image) and image.size == (8, 8) and label == splits.train.labels[0]


@pytest.mark.unit
def test_without_classes_the_classes_are_named_by_number(caplog):
    data = torch.utils.data.Subset(Stripes(30, as_pil=True), range(30))  # a Subset has no classes
    with caplog.at_level(logging.INFO, logger="vitlab"):
        splits = given_splits(data, Stripes(9), None, None, plan=SplitPlan())
    assert splits.class_names == ["0", "1", "2"] and len(splits.val) == 9 and not splits.held_out
    assert "named 0..2" in caplog.text


@pytest.mark.unit
@pytest.mark.parametrize(
    "image, match",
    [
        (torch.randn(3, 8, 8), "not 0..1"),
        (torch.zeros(4, 8, 8), r"\(C, H, W\) with C 1 or 3"),
        ("a.png", "is a str"),
        (torch.zeros(3, 8, 8, dtype=torch.int32), "torch.int32 pixels"),
    ],
)
def test_images_that_are_not_images_are_named(image, match):
    with pytest.raises(ValueError, match=match):
        as_rgb(image, "Stripes[3]")


@pytest.mark.unit
def test_grey_and_uint8_images_become_rgb():
    grey = as_rgb(torch.full((1, 4, 5), 0.5), "x")
    assert grey.mode == "RGB" and grey.size == (5, 4) and grey.getpixel((0, 0)) == (128, 128, 128)
    assert as_rgb(np.full((4, 5), 7, np.uint8), "x").getpixel((1, 1)) == (7, 7, 7)


@pytest.mark.unit
def test_bad_labels_and_a_given_source_read_back_are_refused():
    plan = SplitPlan()
    with pytest.raises(ValueError, match=r"label -1"):
        given_splits([(torch.zeros(3, 2, 2), -1)] * 4, None, None, None, plan=plan)
    with pytest.raises(ValueError, match="no command can read back"):
        load_datasets("dataset:Stripes", None, None)
    with pytest.raises(vitlab.ConfigError, match="not both"):
        vitlab.train("demo", dataset=Stripes(), data={"source": "digits"})


@pytest.mark.integration
def test_train_on_a_torch_dataset(tmp_path):
    result = vitlab.train(tiny_config(tmp_path / "run"), dataset=Stripes(120))
    assert result.summary["steps"] == 20
    assert vitlab.load(result.out).config.class_names == NAMES
    run = yaml.safe_load((result.out / "run.yaml").read_text())
    assert run["data"]["source"] == "dataset:Stripes"


# -- Hugging Face datasets -------------------------------------------------------------------------
@pytest.mark.unit
def test_a_saved_dataset_dict_trains_on_train_and_validates_on_test(tmp_path, caplog):
    folder = tmp_path / "stripes"
    datasets.DatasetDict({"train": striped_hf(60), "test": striped_hf(12)}).save_to_disk(str(folder))
    with caplog.at_level(logging.INFO, logger="vitlab"):
        splits = load_datasets(f"hf:{folder}", None, None)
    assert splits.class_names == NAMES and (len(splits.train), len(splits.val)) == (60, 12)
    assert not splits.held_out and "validating on 'test'" in caplog.text
    image, label = splits.val[4]
    assert isinstance(image, Image.Image) and image.size == (8, 8) and label == 1
    named = load_datasets(f"hf:{folder}:test", None, None)  # one split: val held out of it
    assert (len(named.train), len(named.val)) == (9, 3) and named.held_out


@pytest.mark.unit
def test_a_saved_dataset_holds_out_its_validation_split(tmp_path):
    striped_hf(60).save_to_disk(str(tmp_path / "one"))
    splits = load_datasets(f"hf:{tmp_path / 'one'}", None, None, val_fraction=0.25, seed=3)
    assert (len(splits.train), len(splits.val)) == (45, 15) and np.bincount(splits.val.labels).tolist() == [5, 5, 5]


@pytest.mark.unit
@pytest.mark.parametrize(
    "change, match",
    [
        (lambda d: d.cast_column("note", datasets.ClassLabel(names=["n"])), r"2 \(kind, note\) ClassLabel columns"),
        (lambda d: d.cast_column("kind", datasets.Value("int64")), "no ClassLabel columns.*class_encode_column"),
        (lambda d: d.remove_columns("picture"), "no Image columns.*columns: kind"),
    ],
)
def test_ambiguous_or_missing_columns_are_named(tmp_path, change, match):
    change(striped_hf(12)).save_to_disk(str(tmp_path / "d"))
    with pytest.raises(ValueError, match=match):
        load_datasets(f"hf:{tmp_path / 'd'}", None, None)


@pytest.mark.unit
def test_a_split_it_does_not_have_and_a_missing_package_are_one_line(tmp_path, monkeypatch):
    datasets.DatasetDict({"train": striped_hf(12)}).save_to_disk(str(tmp_path / "d"))
    with pytest.raises(ValueError, match=r"no split 'val2'; its splits: train"):
        load_datasets(f"hf:{tmp_path / 'd'}:val2", None, None)
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if it were not installed
    with pytest.raises(ValueError, match=r"pip install datasets"):
        load_datasets(f"hf:{tmp_path / 'd'}", None, None)


@pytest.mark.unit
def test_a_name_that_is_no_folder_goes_to_load_dataset(monkeypatch):
    asked = []

    def load_dataset(name):
        asked.append(name)
        return datasets.DatasetDict({"train": striped_hf(30), "validation": striped_hf(6)})

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    splits = load_datasets("hf:someone/stripes", None, None)
    assert asked == ["someone/stripes"] and (len(splits.train), len(splits.val)) == (30, 6)


@pytest.mark.integration
def test_vitlab_train_and_eval_with_hf_data(tmp_path, capsys):
    folder = tmp_path / "stripes"
    datasets.DatasetDict({"train": striped_hf(120), "test": striped_hf(30)}).save_to_disk(str(folder))
    flags = list(TINY_FLAGS)
    flags[flags.index("--data") + 1] = f"hf:{folder}"
    assert main(["train", *flags, "--out", str(tmp_path / "run")]) == 0
    assert vitlab.load(tmp_path / "run").config.class_names == NAMES
    capsys.readouterr()
    assert main(["eval", "--ckpt", str(tmp_path / "run"), "--device", "cpu"]) == 0
    assert "30 images" in capsys.readouterr().out
