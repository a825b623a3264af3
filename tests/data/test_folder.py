"""ImageFolder sources, with bad and odd files among the good ones (issues 3 and 6, bad input)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import BAD_IMAGES, ODD_IMAGES, write_class_folders
from vitlab.data import TooManyBadImagesError, build_transforms, load_datasets

HALF = dict(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
TRAIN = build_transforms(16, train=True, crop_pct=1.0, scale=(0.6, 1.0), **HALF)
EVAL = build_transforms(16, train=False, crop_pct=1.0, **HALF)


def unreadable_names(caplog) -> list[str]:
    return [r.args[0] for r in caplog.records if r.name == "vitlab" and r.msg.startswith("skipping unreadable")]


@pytest.mark.unit
def test_train_and_val_folders(tmp_path):
    write_class_folders(tmp_path / "train", {"cat": 6, "dog": 4})
    write_class_folders(tmp_path / "val", {"cat": 2, "dog": 3})
    (tmp_path / "train" / "cat" / "notes.txt").write_text("not an image, and no image extension")
    (tmp_path / "train" / ".ipynb_checkpoints").mkdir()
    splits = load_datasets(str(tmp_path), TRAIN, EVAL)
    assert splits.class_names == ["cat", "dog"]
    assert (len(splits.train), len(splits.val)) == (10, 5)
    image, label = splits.val[4]
    assert image.shape == (3, 16, 16) and label == 1
    assert torch.allclose(image, torch.tensor(40 / 255 * 2 - 1), atol=1e-6)  # dog's grey level
    assert sorted(splits.train.labels) == [0] * 6 + [1] * 4


@pytest.mark.unit
def test_folder_without_val_is_split_by_seeded_stratified_fraction(tmp_path):
    write_class_folders(tmp_path, {"a": 20, "b": 20, "c": 10})
    first = load_datasets(f"imagefolder:{tmp_path}", TRAIN, EVAL, val_fraction=0.2, seed=3)
    again = load_datasets(str(tmp_path), TRAIN, EVAL, val_fraction=0.2, seed=3)
    other = load_datasets(str(tmp_path), TRAIN, EVAL, val_fraction=0.2, seed=4)
    assert (len(first.train), len(first.val)) == (40, 10)
    assert sorted(first.val.labels) == [0] * 4 + [1] * 4 + [2] * 2  # stratified
    assert first.val.sources == again.val.sources != other.val.sources
    assert not set(first.train.sources) & set(first.val.sources)
    assert first.val.transform is EVAL and first.train.transform is TRAIN


@pytest.mark.integration
def test_bad_files_are_skipped_and_named_once_odd_ones_are_used(tmp_path, caplog):
    good = write_class_folders(tmp_path / "train", {"a": 600, "b": 600})
    for name, make in ODD_IMAGES.items():
        (tmp_path / "train" / "a" / name).write_bytes(make())
    for name, (make, _) in BAD_IMAGES.items():  # 10 bad of 1223: under 1%
        (tmp_path / "train" / "b" / name).write_bytes(make())
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        splits = load_datasets(str(tmp_path), TRAIN, EVAL, val_fraction=0.1)
    used = {Path(p).name for p in splits.train.sources + splits.val.sources}
    assert set(ODD_IMAGES) <= used and not set(BAD_IMAGES) & used
    assert len(splits.train) + len(splits.val) == len(good) + len(ODD_IMAGES)
    named = unreadable_names(caplog)
    assert sorted(Path(n).name for n in named) == sorted(BAD_IMAGES)  # each named exactly once
    assert any("10 of 1223 images" in r.getMessage() for r in caplog.records)
    loader = torch.utils.data.DataLoader(splits.train, batch_size=64, num_workers=2)
    count = 0
    for images, labels in loader:
        assert images.shape[1:] == (3, 16, 16) and torch.isfinite(images).all()
        count += len(labels)
    assert count == len(splits.train)
    assert len(unreadable_names(caplog)) == len(BAD_IMAGES)  # decoding in workers named nothing again


@pytest.mark.unit
def test_too_many_bad_files_stop_with_a_count_and_examples(tmp_path):
    write_class_folders(tmp_path, {"a": 50, "b": 50})
    for name in ("empty.jpg", "truncated.png", "text_not_image.png"):
        (tmp_path / "b" / name).write_bytes(BAD_IMAGES[name][0]())
    with pytest.raises(TooManyBadImagesError, match=r"2 of the first \d+ of 103 images .*more than 1%") as caught:
        load_datasets(str(tmp_path), TRAIN, EVAL)
    assert "empty.jpg: empty" in str(caught.value) and "text_not_image.png: not an image" in str(caught.value)
    splits = load_datasets(str(tmp_path), TRAIN, EVAL, max_bad_fraction=0.05)  # a looser limit passes
    assert len(splits.train) + len(splits.val) == 100


@pytest.mark.unit
@pytest.mark.parametrize("check", ["header", "auto"])
def test_header_check_leaves_truncated_jpeg_to_getitem_which_substitutes(tmp_path, caplog, monkeypatch, check):
    monkeypatch.setattr("vitlab.data.scan.AUTO_DECODE_LIMIT", 100)  # "auto" reads headers above this
    write_class_folders(tmp_path / "train", {"a": 200, "b": 200})
    write_class_folders(tmp_path / "val", {"a": 2, "b": 2})
    (tmp_path / "train" / "b" / "truncated.jpg").write_bytes(BAD_IMAGES["truncated.jpg"][0]())
    (tmp_path / "val" / "b" / "truncated.jpg").write_bytes(BAD_IMAGES["truncated.jpg"][0]())
    with pytest.raises(TooManyBadImagesError):  # the small val split is decoded under "auto"
        load_datasets(str(tmp_path), TRAIN, EVAL, check="decode")
    (tmp_path / "val" / "b" / "truncated.jpg").unlink()
    splits = load_datasets(str(tmp_path), TRAIN, EVAL, check=check)
    caplog.clear()
    index = [Path(p).name for p in splits.train.sources].index("truncated.jpg")
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        image, label = splits.train[index]
        splits.train[index]
    assert image.shape == (3, 16, 16)
    assert label == splits.train.labels[(index + 1) % len(splits.train)]  # the next image stood in
    assert [Path(n).name for n in unreadable_names(caplog)] == ["truncated.jpg"]


@pytest.mark.unit
def test_files_that_break_after_loading_are_replaced_and_counted(tmp_path):
    write_class_folders(tmp_path / "train", {"a": 150, "b": 150})  # 1% of 300: 3 may fail
    write_class_folders(tmp_path / "val", {"a": 1, "b": 1})
    splits = load_datasets(str(tmp_path), TRAIN, EVAL)
    Path(splits.train.sources[0]).write_bytes(b"")
    _, label = splits.train[0]
    assert label == splits.train.labels[1] == 0  # the next image stands in
    for index in (150, 160, 170):
        Path(splits.train.sources[index]).write_bytes(b"")
    splits.train[150], splits.train[160]
    with pytest.raises(TooManyBadImagesError, match="4 of 300 images .* cannot be decoded"):
        splits.train[170]


@pytest.mark.unit
@pytest.mark.parametrize(
    "layout, error, match",
    [
        ("missing", FileNotFoundError, "not found"),
        ("empty", ValueError, "no class sub-folders"),
        ("flat", ValueError, "no class sub-folders"),
        ("empty_class", ValueError, r"class folder '.*/train/dog' has no image files"),
        ("only_bad_class", ValueError, r"class folder '.*/train/dog' has no readable images"),
        ("unknown_val_class", ValueError, r"class folder '.*/val/bird' has no counterpart"),
    ],
)
def test_folder_problems_raise_one_clear_error_naming_the_path(tmp_path, layout, error, match):
    root = tmp_path / "data"
    if layout != "missing":
        root.mkdir()
    if layout == "flat":
        Image.new("RGB", (4, 4)).save(root / "x.png")
    if layout in ("empty_class", "only_bad_class", "unknown_val_class"):
        write_class_folders(root / "train", {"cat": 300})
        (root / "train" / "dog").mkdir()
    if layout == "only_bad_class":
        (root / "train" / "dog" / "empty.jpg").write_bytes(b"")
    if layout == "unknown_val_class":
        write_class_folders(root / "train", {"dog": 3})
        write_class_folders(root / "val", {"cat": 1, "bird": 1})
    with pytest.raises(error, match=match) as caught:
        load_datasets(str(root), TRAIN, EVAL)
    assert str(root) in str(caught.value)


@pytest.mark.unit
def test_split_datasets_pickle_into_workers(tmp_path):
    import pickle

    write_class_folders(tmp_path, {"a": 5, "b": 5})
    splits = load_datasets(str(tmp_path), TRAIN, EVAL)
    clone = pickle.loads(pickle.dumps(splits.val))
    assert torch.equal(clone[0][0], splits.val[0][0]) and np.array_equal(clone.labels, splits.val.labels)


def _tree_without_loops(root: Path) -> None:
    """Class folders with nested folders, odd names, and links that reach nothing twice."""
    write_class_folders(root, {"b": 3, "a": 2, "C": 2})
    for folder in ("a/sub", "a/sub/deeper", "a/Sub", "a/sub.x", "b/z"):
        (root / folder).mkdir(parents=True)
    for path in (
        "a/sub/2.png",
        "a/sub/deeper/1.JPG",
        "a/Sub/0.png",
        "a/sub.x/é.png",
        "b/z/.hidden.png",
        "b/10.png",
        "b/9.png",
        "b/notes.txt",
    ):
        Image.new("RGB", (4, 4)).save(root / path, format="PNG")
    outside = root.parent / "outside"
    write_class_folders(outside, {"more": 2, "single": 1})
    (root / "b" / "linked").symlink_to(outside / "more")  # a link to a folder seen nowhere else
    (root / "C" / "one.png").symlink_to(outside / "single" / "00000.png")  # and to a file


@pytest.mark.unit
def test_the_listing_of_a_folder_without_loops_or_duplicates_is_torchvisions(tmp_path):
    from torchvision.datasets.folder import make_dataset

    from vitlab.data.image_folder import list_class_files
    from vitlab.data.images import is_image_file

    root = tmp_path / "data"
    _tree_without_loops(root)
    classes = {"C": 0, "a": 1, "b": 2}
    expected = make_dataset(str(root), classes, is_valid_file=is_image_file, allow_empty=True)
    assert len(expected) == 16
    assert list_class_files(root, classes) == expected  # so the seeded splits are unchanged too


@pytest.mark.unit
@pytest.mark.fault("listing", kinds=4)
@pytest.mark.timeout(30)  # torchvision's walk of these links takes exponential time
def test_link_loops_and_duplicate_links_list_each_real_file_once(tmp_path, caplog):
    root = tmp_path / "data"
    write_class_folders(root, {"cat": 10, "dog": 10})
    (root / "cat" / "loop").symlink_to(".")  # kind 1: a folder that links to itself
    (root / "cat" / "inner").mkdir()
    (root / "cat" / "inner" / "up").symlink_to("..")  # kind 2: a link back to an ancestor
    (root / "dog" / "again").symlink_to(root / "dog")  # kind 3: a second path to a folder
    (root / "dog" / "twin.png").symlink_to("00003.png")  # kind 4: a second name for a file
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        splits = load_datasets(str(root), TRAIN, EVAL, val_fraction=0.2, seed=0)
    sources = splits.train.sources + splits.val.sources
    assert len(sources) == 20 and len({os.path.realpath(p) for p in sources}) == 20
    assert not {os.path.realpath(p) for p in splits.train.sources} & {os.path.realpath(p) for p in splits.val.sources}
    assert sorted(np.concatenate([splits.train.labels, splits.val.labels]).tolist()) == [0] * 10 + [1] * 10
    assert any("listed once" in r.getMessage() for r in caplog.records)


@pytest.mark.unit
@pytest.mark.fault("listing", kinds=1)
def test_one_file_in_two_classes_is_an_error_naming_both(tmp_path):
    root = tmp_path / "data"
    write_class_folders(root, {"cat": 3, "dog": 3})
    (root / "dog" / "cat.png").symlink_to(root / "cat" / "00001.png")
    with pytest.raises(ValueError, match=r"dog/cat\.png' and '.*cat/00001\.png' are the same file"):
        load_datasets(str(root), TRAIN, EVAL)


@pytest.mark.unit
@pytest.mark.fault("listing", kinds=2)
@pytest.mark.parametrize("raw", [b"caf\xe9", b"two\nlines"])
def test_a_class_folder_whose_name_is_not_text_is_refused_naming_it(tmp_path, raw):
    name = os.fsdecode(raw)  # not UTF-8; a control character: neither can be written as a class name
    write_class_folders(tmp_path, {"cat": 4, name: 4})
    with pytest.raises(ValueError, match=r"class folder b'.*': its name is not UTF-8 text or holds a control"):
        load_datasets(str(tmp_path), TRAIN, EVAL)


@pytest.mark.unit
def test_class_folders_named_in_any_script_are_classes(tmp_path):
    write_class_folders(tmp_path, {"犬　猫": 4, "café": 4})  # an ideographic space; a UTF-8 é
    assert load_datasets(str(tmp_path), TRAIN, EVAL).class_names == ["café", "犬　猫"]
