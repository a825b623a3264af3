"""No data reader costs more than 64 MiB for a file under 1 KB, whatever its header declares: CIFAR
batches with any declared array shape, tar members of any declared size, image headers of any
declared width and height. Traced memory (numpy, Python) stays under the bar, and PIL's untraced
allocations are held to it by a cap on the address space: a reader that tried to allocate beyond it
would fail with MemoryError ("too large to decode in memory"), which counts as a failure here."""

from __future__ import annotations

import pickle
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from helpers import (
    SMALL_INPUT_PEAK,
    ArrayCall,
    ForgedArray,
    memory_cap,
    png_header_only,
    shard,
    tar_member,
    traced_peak,
)
from vitlab.data import BadImageError, read_image
from vitlab.data.cifar import read_batch
from vitlab.data.shards import index_shard

pytestmark = [pytest.mark.unit, pytest.mark.fault("hostile-input", kinds=1)]
EXAMPLES = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

SIDES = st.integers(0, 2**31 - 1)
SHAPES = st.lists(st.integers(0, 2**40), min_size=1, max_size=3).map(tuple)


def within_the_bar(function) -> BaseException | None:
    raised, peak = traced_peak(function)
    assert peak < SMALL_INPUT_PEAK, f"{peak / 2**20:.0f} MiB traced"
    assert not isinstance(raised, MemoryError) and "in memory" not in str(raised), repr(raised)
    return raised


@EXAMPLES
@given(
    shape=SHAPES,
    dtype=st.sampled_from(["u1", "<i8", "<f4"]),
    raw=st.binary(max_size=400),
    call=st.booleans(),
)
@example(shape=(1000080, 3072), dtype="u1", raw=b"", call=True)
def test_a_cifar_batch_under_1kb(tmp_path, shape, dtype, raw, call):
    """The array as numpy pickles it (its state declaring `shape`), or a call of numpy.ndarray(shape)."""
    path = tmp_path / "data_batch_1"
    array = ArrayCall(shape, dtype) if call else ForgedArray(shape, raw, dtype)
    path.write_bytes(pickle.dumps({"data": array, "labels": [0]}, protocol=2))
    assert path.stat().st_size < 1024
    raised = within_the_bar(lambda: read_batch(path, "labels"))
    assert raised is None or isinstance(raised, ValueError), repr(raised)


@EXAMPLES
@given(declared=st.integers(0, 2**62), data=st.binary(max_size=300), name=st.sampled_from(["0.png", "0.cls"]))
@example(declared=6 * 2**30, data=b"7", name="0.cls")
def test_a_tar_member_under_1kb(tmp_path, declared, data, name):
    path = shard(tmp_path / "x.tar", [tar_member(name, data, declared=declared)], end=False)
    assert path.stat().st_size < 2048  # one header block, the data and its padding
    raised = within_the_bar(lambda: index_shard(path, {}))
    assert raised is None or isinstance(raised, ValueError), repr(raised)


def gif_header(width: int, height: int) -> bytes:
    screen = struct.pack("<HHBBB", width, height, 0, 0, 0)
    image = b"," + struct.pack("<HHHHB", 0, 0, width, height, 0)
    return b"GIF89a" + screen + image + b"\x02\x02\x44\x01\x00;"


def bmp_header(width: int, height: int) -> bytes:
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + 40 + 16, 0, 0, 54) + info + bytes(16)


@EXAMPLES
@given(
    width=SIDES.filter(lambda side: side < 2**16),
    height=SIDES.filter(lambda side: side < 2**16),
    kind=st.sampled_from([png_header_only, gif_header, bmp_header]),
)
@example(width=9000, height=9000, kind=png_header_only)
@example(width=9000, height=9000, kind=gif_header)
@example(width=6000, height=6000, kind=bmp_header)
def test_an_image_header_under_1kb(width, height, kind):
    data = kind(width, height)
    assert len(data) < 1024
    with memory_cap(SMALL_INPUT_PEAK):  # PIL allocates outside tracemalloc's sight
        raised = within_the_bar(lambda: read_image(data, name="forged"))
    assert raised is None or isinstance(raised, BadImageError), repr(raised)
