"""Data sources whose files lie: a CIFAR batch that calls numpy.ndarray, tar members that are sparse
or longer than the shard, labels of a billion classes, shards cut short or with a key twice, and
FractalDB sizes that would allocate terabytes. Each is refused by name before anything large is
allocated (tracemalloc, under a cap on the address space so that today's main fails safely)."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
from PIL import Image

from helpers import (
    SMALL_INPUT_PEAK,
    ArrayCall,
    ForgedArray,
    gnu_sparse_member,
    one_line_error,
    shard,
    tar_member,
    traced_peak,
)
from vitlab.data.cifar import read_batch
from vitlab.data.fractaldb import FractalCategory, FractalDBSpec, render_bytes, render_category
from vitlab.data.shards import index_shard

pytestmark = pytest.mark.unit


def png(value: int = 0) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (value, value, value)).save(buffer, "PNG")
    return buffer.getvalue()


def sample(key: str, label: bytes = b"0") -> list[bytes]:
    return [tar_member(f"{key}.png", png()), tar_member(f"{key}.cls", label)]


def refused_small(function, match: str) -> str:
    raised, peak = traced_peak(function)
    assert isinstance(raised, ValueError) and match in str(raised), repr(raised)
    assert peak < SMALL_INPUT_PEAK, f"{peak / 2**20:.0f} MiB traced before the refusal"
    return str(raised)


@pytest.mark.fault("hostile-input", kinds=2)
def test_a_cifar_batch_that_calls_numpy_ndarray_or_lies_about_its_shape_is_refused(tmp_path):
    forged = tmp_path / "data_batch_1"
    forged.write_bytes(pickle.dumps({"data": ArrayCall((1000080, 3072)), "labels": [0]}, protocol=2))
    assert forged.stat().st_size < 200
    refused_small(lambda: read_batch(forged, "labels"), "refusing to call numpy.ndarray")
    forged.write_bytes(pickle.dumps({"data": ForgedArray((1000080, 3072), b"\0" * 64), "labels": [0]}, protocol=2))
    refused_small(lambda: read_batch(forged, "labels"), "declared uint8 (1000080, 3072) (3,072,245,760 bytes) with 64")


def test_a_cifar_batch_pickled_by_any_protocol_reads_as_numpy_wrote_it(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, (3, 3072), dtype=np.uint8)
    for protocol in (2, 3, 4, 5):
        path = tmp_path / f"batch{protocol}"
        path.write_bytes(pickle.dumps({"data": data, "labels": np.array([1, 2, 3])}, protocol=protocol))
        images, labels = read_batch(path, "labels")
        assert np.array_equal(images, data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)) and labels.tolist() == [
            1,
            2,
            3,
        ]


@pytest.mark.fault("hostile-input", kinds=1)  # one per parameter
@pytest.mark.parametrize(
    "members, end, message",
    [
        ([gnu_sparse_member("0.cls", 6 * 2**30), tar_member("0.png", png())], True, "0.cls is a sparse file"),
        ([tar_member("0.png", png(), declared=2**40)], False, "declares 1,099,511,627,776 bytes"),
        (sample("0") + sample("1") + [tar_member("2.png", png() + bytes(4000))[:2000]], False, "is cut short"),
        (sample("0") + sample("1") + [tar_member("2.png", png())[:300]], False, "no end-of-archive blocks follow"),
        (sample("0") + sample("1"), False, "no end-of-archive blocks follow"),
    ],
    ids=["gnu-sparse-label", "member-longer-than-the-shard", "cut-mid-member", "cut-mid-header", "cut-between"],
)
def test_a_shard_with_a_sparse_member_or_cut_short_is_refused_by_name(tmp_path, members, end, message):
    path = shard(tmp_path / "train-0.tar", members, end=end)
    text = refused_small(lambda: index_shard(path, {}), message)
    assert str(path) in text


@pytest.mark.fault("hostile-input", kinds=2)
def test_a_key_twice_in_a_shard_is_refused_by_name(tmp_path):
    twice = shard(tmp_path / "labels.tar", sample("0") + [tar_member("0.cls", b"1")])
    refused_small(lambda: index_shard(twice, {}), "sample '0' in shard")
    images = shard(tmp_path / "images.tar", sample("0") + [tar_member("0.jpg", png())])
    refused_small(lambda: index_shard(images, {}), "has a second image member")


@pytest.mark.fault("hostile-input", kinds=1)
def test_a_label_of_a_billion_is_refused_before_any_class_list_is_built(tmp_path, capsys):
    folder = tmp_path / "shards"
    folder.mkdir()
    shard(folder / "train-0.tar", sample("0", b"1000000000") + sample("1", b"1"))
    refused_small(lambda: index_shard(folder / "train-0.tar", {}), "label 1000000000 in")
    line = one_line_error(
        capsys, ["train", "--data", f"wds:{folder}/train-0.tar", "--steps", "1", "--out", str(tmp_path / "run")]
    )
    assert "label 1000000000" in line and "outside 0..1048575" in line


@pytest.mark.fault("hostile-input", kinds=1)  # one per parameter
@pytest.mark.parametrize("flag, value", [("--per-class", "1000000000"), ("--size", "1000000")])
def test_fractaldb_sizes_beyond_memory_are_one_line_and_leave_no_out(tmp_path, capsys, flag, value):
    args = {"--classes": "2", "--per-class": "3", "--size": "16", flag: value}
    argv = ["data", "fractaldb", "--out", str(tmp_path / "out"), "--workers", "1"]
    lines = []
    raised, peak = traced_peak(
        lambda: lines.append(one_line_error(capsys, argv + [x for kv in args.items() for x in kv]))
    )
    assert raised is None, raised
    assert f"{flag} {value}" in lines[0] and "GiB of memory at once, above the limit" in lines[0]
    assert peak < SMALL_INPUT_PEAK and not (tmp_path / "out").exists()


def test_render_bytes_bounds_what_rendering_takes():
    spec = FractalDBSpec(classes=1, per_class=6, size=24)
    category = FractalCategory(
        np.array([[0.5, 0, 0, 0.5, 0, 0], [0.5, 0, 0, 0.5, 0.5, 0.5]]), np.array([0.5, 0.5]), 0.3
    )
    _, peak = traced_peak(lambda: render_category(category, spec.per_class, spec.size, 0, 0))
    assert peak <= render_bytes(spec.per_class, spec.size) <= 1.5 * peak
