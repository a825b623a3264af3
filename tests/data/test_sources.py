"""digits, CIFAR pickles and WebDataset shards (written here in their real formats), and data specs."""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import BAD_IMAGES, write_cifar
from vitlab.data import build_transforms, load_datasets, parse_source

HALF = dict(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
TRAIN = build_transforms(16, train=True, crop_pct=1.0, scale=(0.6, 1.0), hflip=False, **HALF)
EVAL = build_transforms(16, train=False, crop_pct=1.0, **HALF)


# -- digits ------------------------------------------------------------------------------------
@pytest.mark.unit
def test_digits_fixed_stratified_split_whatever_the_seed():
    splits = load_datasets("digits", TRAIN, EVAL, seed=0)
    other = load_datasets("digits", TRAIN, EVAL, seed=7, val_fraction=0.5)
    assert (len(splits.train), len(splits.val)) == (1437, 360)
    assert splits.class_names == [str(d) for d in range(10)]
    assert np.array_equal(splits.val.images, other.val.images)
    counts = np.bincount(splits.val.labels, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # stratified: ~36 per class
    image, label = splits.val[0]
    assert image.shape == (3, 16, 16) and image.dtype == torch.float32 and isinstance(label, int)


@pytest.mark.unit
def test_digits_are_grey_rgb_scaled_to_0_255():
    from sklearn.datasets import load_digits

    splits = load_datasets("digits", None, None)
    pil, label = splits.train[0]
    pixels = np.asarray(pil)
    assert pil.mode == "RGB" and pil.size == (8, 8)
    assert (pixels[..., 0] == pixels[..., 1]).all() and (pixels[..., 0] == pixels[..., 2]).all()
    raw = load_digits()
    match = next(i for i in range(len(raw.target)) if np.array_equal(np.rint(raw.images[i] * 255 / 16), pixels[..., 0]))
    assert raw.target[match] == label
    everything = np.concatenate([splits.train.images, splits.val.images])
    assert everything.max() == 255 and everything.min() == 0


# -- CIFAR -------------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("kind", ["cifar10", "cifar100"])
def test_cifar_pickles_as_distributed(tmp_path, kind):
    folder = write_cifar(tmp_path, kind)
    for spec in (str(tmp_path), str(folder), f"{kind}:{tmp_path}"):
        assert parse_source(spec)[0] == kind
    splits = load_datasets(str(tmp_path), None, None)
    train_batches = 5 if kind == "cifar10" else 1
    assert (len(splits.train), len(splits.val)) == (6 * train_batches, 6)
    assert len(splits.class_names) == (10 if kind == "cifar10" else 100)
    test = pickle.loads((folder / ("test_batch" if kind == "cifar10" else "test")).read_bytes())
    image, label = splits.val[2]
    row = test["data"][2]
    pixels = np.asarray(image)
    assert image.size == (32, 32) and label == test["labels" if kind == "cifar10" else "fine_labels"][2]
    # Row layout: 1024 red, then 1024 green, then 1024 blue values, each 32 rows of 32.
    assert pixels[0, 1].tolist() == [row[1], row[1024 + 1], row[2048 + 1]]
    assert pixels[1, 0, 2] == row[2048 + 32]
    tensor_splits = load_datasets(f"{kind}:{folder}", TRAIN, EVAL)
    assert tensor_splits.train[0][0].shape == (3, 16, 16)


class _RunsCode:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


@pytest.mark.unit
def test_cifar_pickle_that_would_run_code_is_refused_without_running_it(tmp_path):
    folder = write_cifar(tmp_path, "cifar10")
    marker = tmp_path / "code_ran"
    payload = pickle.dumps({"data": _RunsCode(marker), "labels": []}, protocol=2)
    (folder / "data_batch_3").write_bytes(payload)
    with pytest.raises(ValueError, match=r"data_batch_3' cannot be read: refusing to load posix.mkdir"):
        load_datasets(str(tmp_path), None, None)
    assert not marker.exists()
    pickle.loads(payload)  # what a plain unpickler would have done
    assert marker.exists()


@pytest.mark.unit
@pytest.mark.parametrize(
    "damage, match",
    [
        ("missing", r"CIFAR file '.*data_batch_2' is missing"),
        ("truncated", r"data_batch_2' cannot be read"),
        ("no_labels", r"data_batch_2' has no 'labels' entry"),
        ("wrong_shape", r"data_batch_2' has data uint8 \(6, 100\)"),
    ],
)
def test_damaged_cifar_files_are_named(tmp_path, damage, match):
    folder = write_cifar(tmp_path, "cifar10")
    path = folder / "data_batch_2"
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    else:
        batch = {"data": np.zeros((6, 100 if damage == "wrong_shape" else 3072), np.uint8), "labels": [0] * 6}
        if damage == "no_labels":
            del batch["labels"]
        path.write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        load_datasets(str(tmp_path), None, None)


@pytest.mark.unit
def test_cifar_prefix_without_the_folder_says_how_to_get_it(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="no cifar100 python folder .*--download"):
        load_datasets(f"cifar100:{tmp_path}", None, None)
    monkeypatch.chdir(tmp_path)
    assert parse_source("cifar10") == ("cifar10", ".")
    with pytest.raises(FileNotFoundError, match=r"no cifar10 python folder \(cifar-10-batches-py\) in '.'"):
        load_datasets("cifar10", None, None)


@pytest.mark.unit
def test_download_goes_through_torchvision(tmp_path, monkeypatch):
    import torchvision

    calls = []

    def fake_cifar100(root, download):  # stands in for the md5-checked fetch; tests never download
        calls.append((root, download))
        write_cifar(Path(root), "cifar100")

    monkeypatch.setattr(torchvision.datasets, "CIFAR100", fake_cifar100)
    splits = load_datasets(f"cifar100:{tmp_path}", None, None, download=True)
    assert calls == [(str(tmp_path), True)] and len(splits.class_names) == 100


@pytest.mark.unit
@pytest.mark.parametrize("protocol", [2, 4])
def test_cifar_pickles_written_by_python3_with_bytes_keys(tmp_path, protocol):
    folder = write_cifar(tmp_path, "cifar10")
    for path in folder.iterdir():  # the same content re-pickled as Python 3 reads the originals with encoding="bytes"
        content = pickle.loads(path.read_bytes())
        as_bytes = {
            key.encode(): ([n.encode() for n in value] if key == "label_names" else value)
            for key, value in content.items()
        }
        path.write_bytes(pickle.dumps(as_bytes, protocol=protocol))
    splits = load_datasets(str(tmp_path), None, None)
    assert (len(splits.train), len(splits.val)) == (30, 6)
    assert splits.class_names == [f"class{i}" for i in range(10)]
    first = pickle.loads((folder / "data_batch_1").read_bytes())
    assert splits.train.labels[:6] == list(first[b"labels"])
    assert np.asarray(splits.train[0][0])[0, 0].tolist() == first[b"data"][0][[0, 1024, 2048]].tolist()


@pytest.mark.unit
@pytest.mark.fault("bad-input", kinds=1)
@pytest.mark.parametrize("failure", ["offline", "corrupt"])
def test_download_failure_is_one_line(tmp_path, monkeypatch, failure):
    import urllib.error

    import torchvision

    def failing_cifar10(root, download):
        if failure == "offline":
            raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
        raise RuntimeError("File not found or corrupted.")

    monkeypatch.setattr(torchvision.datasets, "CIFAR10", failing_cifar10)
    with pytest.raises(
        ValueError,
        match=r"--download: cannot fetch cifar10 into '.*' \((.*name resolution|File not "
        r"found or corrupted\.)\); copy the cifar-10-batches-py folder there",
    ):
        load_datasets(f"cifar10:{tmp_path}", None, None, download=True)


# -- WebDataset shards -------------------------------------------------------------------------
def png(grey: int, size: int = 8) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), (grey,) * 3).save(buffer, "PNG")
    return buffer.getvalue()


def write_shards(pattern: str, samples: list[tuple[bytes, int | str]], shards: int) -> list[Path]:
    """Samples spread over `shards` tar files written by webdataset's own TarWriter."""
    import webdataset as wds

    paths = []
    for s in range(shards):
        path = Path(pattern.format(s))
        with wds.TarWriter(str(path)) as sink:
            for i in range(s, len(samples), shards):
                data, label = samples[i]
                sink.write({"__key__": f"sample{i:06d}", "png": data, "cls": str(label).encode()})
        paths.append(path)
    return paths


def grey_samples(count: int, classes: int = 3) -> list[tuple[bytes, int]]:
    return [(png(40 * (i % classes)), i % classes) for i in range(count)]


@pytest.mark.integration
def test_brace_pattern_shards_with_classes_txt(tmp_path):
    write_shards(str(tmp_path / "shards-{:06d}.tar"), grey_samples(30), shards=3)
    (tmp_path / "classes.txt").write_text("zero\none\ntwo\n")
    spec = str(tmp_path / "shards-{000000..000002}.tar")
    assert parse_source(spec) == ("wds", spec)
    splits = load_datasets(spec, TRAIN, EVAL, val_fraction=0.2, seed=1)
    assert splits.class_names == ["zero", "one", "two"]
    assert (len(splits.train), len(splits.val)) == (24, 6)
    assert sorted(splits.val.labels) == [0, 0, 1, 1, 2, 2]
    for index in range(len(splits.val)):  # each sample's image matches its label
        image, label = splits.val[index]
        assert torch.allclose(image, torch.tensor(40 * label / 255 * 2 - 1), atol=1e-6)
    loader = torch.utils.data.DataLoader(splits.train, batch_size=8, num_workers=2, shuffle=True)
    assert sum(len(labels) for _, labels in loader) == 24


@pytest.mark.unit
def test_folder_of_train_and_val_shards_with_json_classes_and_name_labels(tmp_path, caplog):
    names = ["cat", "dog"]
    samples = [(png(40 * (i % 2)), names[i % 2]) for i in range(120)]
    samples[7] = (BAD_IMAGES["truncated.png"][0](), "dog")  # one bad image among 120: under 1%
    write_shards(str(tmp_path / "train-{:03d}.tar"), samples, shards=2)
    write_shards(str(tmp_path / "val-{:03d}.tar"), [(png(40), "dog"), (png(0), "cat")], shards=1)
    (tmp_path / "classes.json").write_text(json.dumps({"dog": 1, "cat": 0}))
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        splits = load_datasets(f"wds:{tmp_path}", TRAIN, EVAL)
    assert splits.class_names == ["cat", "dog"]
    assert (len(splits.train), len(splits.val)) == (119, 2)
    assert splits.val.labels == [1, 0] and splits.val.transform is EVAL
    named = [r.args[0] for r in caplog.records if r.msg.startswith("skipping unreadable")]
    assert named == [f"{tmp_path / 'train-001.tar'}:sample000007.png"]


@pytest.mark.unit
def test_single_tar_without_class_list_names_classes_by_index(tmp_path):
    [path] = write_shards(str(tmp_path / "data{}.tar"), grey_samples(20, classes=4), shards=1)
    splits = load_datasets(str(path), None, None, val_fraction=0.25)
    assert splits.class_names == ["0", "1", "2", "3"]
    assert (len(splits.train), len(splits.val)) == (15, 5)
    assert splits.train[0][0].mode == "RGB"


@pytest.mark.unit
def test_shard_problems_name_the_file(tmp_path):
    write_shards(str(tmp_path / "s-{}.tar"), grey_samples(4), shards=2)
    with pytest.raises(FileNotFoundError, match=r"shard '.*s-2.tar' does not exist"):
        load_datasets(str(tmp_path / "s-{0..2}.tar"), None, None)
    (tmp_path / "classes.txt").write_text("a\nb\n")
    with pytest.raises(ValueError, match=r"label 2 is outside the 2 classes"):
        load_datasets(str(tmp_path / "s-{0..1}.tar"), None, None)
    import tarfile

    with tarfile.open(tmp_path / "nolabel.tar", "w") as tar:
        info = tarfile.TarInfo("x001.png")
        data = png(0)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ValueError, match=r"sample 'x001' in shard '.*nolabel.tar' has no label"):
        load_datasets(str(tmp_path / "nolabel.tar"), None, None)
    (tmp_path / "broken.tar").write_bytes(b"not a tar" * 100)
    with pytest.raises(ValueError, match=r"shard '.*broken.tar' is not a readable uncompressed tar"):
        load_datasets(str(tmp_path / "broken.tar"), None, None)


# -- data specs --------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize(
    "spec, error, match",
    [
        ("", ValueError, "empty data source"),
        ("no/such/folder", FileNotFoundError, "'no/such/folder' not found"),
        ("cifar11:/data", ValueError, "unknown data source kind 'cifar11'"),
    ],
)
def test_wrong_specs_raise_one_clear_error(spec, error, match):
    with pytest.raises(error, match=match):
        load_datasets(spec, None, None)


@pytest.mark.unit
def test_a_plain_file_or_download_of_a_folder_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ValueError, match="notes.txt' is a file"):
        load_datasets(str(tmp_path / "notes.txt"), None, None)
    (tmp_path / "a").mkdir()
    with pytest.raises(ValueError, match="--download only fetches CIFAR"):
        load_datasets(str(tmp_path), None, None, download=True)
    with pytest.raises(ValueError, match="check must be"):
        load_datasets("digits", None, None, check="maybe")
