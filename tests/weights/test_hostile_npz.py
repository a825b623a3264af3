""".npz checkpoints whose member headers lie about their shape, directly and through the catalogue's
cache, and an empty .npz: each one line naming the file and member, with nothing large allocated
(tracemalloc, under a cap on the address space so that today's main fails safely)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vitlab
from helpers import SMALL_INPUT_PEAK, lying_npz, traced_peak
from vitlab.weights import CheckpointError
from vitlab.weights.catalogue import find
from vitlab.weights.fetch import DIGEST_SUFFIX, cache_path
from vitlab.weights.npz import read_arrays

pytestmark = pytest.mark.unit

TINY = "Ti/16:augreg-in21k-ft-in1k"  # no published checksum: trusted on first use


def refused(function, *words: str) -> str:
    raised, peak = traced_peak(function)
    assert isinstance(raised, CheckpointError) and all(w in str(raised) for w in words), repr(raised)
    assert peak < SMALL_INPUT_PEAK, f"{peak / 2**20:.0f} MiB traced before the refusal"
    return str(raised)


@pytest.mark.fault("hostile-input", kinds=1)  # one per parameter
@pytest.mark.parametrize("shape", [(2**36,), (2**32,)], ids=["256GiB", "16GiB"])
def test_an_npz_member_whose_header_lies_is_refused_before_allocation(tmp_path, shape):
    path = lying_npz(tmp_path / "lie.npz", shape)
    assert path.stat().st_size < 400
    message = refused(lambda: vitlab.load(path, memory_limit=2**50), "lie.npz:embedding/kernel.npy", "cut short")
    assert f"declares float32 {shape}" in message and "pickled" not in message


@pytest.mark.fault("hostile-input", kinds=2)
def test_a_lying_npz_is_refused_through_the_catalogue_download_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITLAB_CACHE", str(tmp_path / "cache"))
    mirror = tmp_path / "mirror"
    monkeypatch.setenv("VITLAB_WEIGHTS_MIRROR", mirror.as_uri())
    monkeypatch.delenv("VITLAB_OFFLINE", raising=False)
    url = find(TINY).downloads[0].url
    published = mirror / url.split("://", 1)[1]
    published.parent.mkdir(parents=True)
    lying_npz(published, (2**36,))
    refused(lambda: vitlab.load(TINY), "could not download", "declares float32 (68719476736,)")
    assert not cache_path(url).exists()  # not trusted, not kept

    cached = cache_path(url)  # a file put in the cache by hand, with its digest recorded
    cached.parent.mkdir(parents=True, exist_ok=True)
    lying_npz(cached, (2**36,))
    cached.with_name(cached.name + DIGEST_SUFFIX).write_text(hashlib.sha256(cached.read_bytes()).hexdigest())
    monkeypatch.setenv("VITLAB_OFFLINE", "1")
    refused(lambda: vitlab.load(TINY), str(cached), "declares float32 (68719476736,)")


@pytest.mark.fault("hostile-input", kinds=1)
def test_an_empty_npz_is_one_line(tmp_path):
    (tmp_path / "empty.npz").write_bytes(b"")
    refused(lambda: vitlab.load(tmp_path / "empty.npz"), "empty.npz: empty (0 bytes); not an .npz")


SHAPES = st.lists(st.integers(0, 2**40), min_size=0, max_size=3).map(tuple)
DTYPES = st.sampled_from(["<f4", "<f8", "|u1", "<i8", ">f4", "|O", "<U7"])


@pytest.mark.fault("hostile-input", kinds=1)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=SHAPES, dtype=DTYPES, data=st.binary(max_size=600))
def test_no_npz_under_1kb_costs_more_than_64mib_whatever_its_header_says(tmp_path, shape, dtype, data):
    path = lying_npz(tmp_path / "x.npz", shape, dtype, data)
    assert path.stat().st_size < 1024
    raised, peak = traced_peak(lambda: read_arrays(path, memory_limit=2**50))
    assert raised is None or isinstance(raised, CheckpointError), repr(raised)
    assert peak < SMALL_INPUT_PEAK, f"{peak / 2**20:.0f} MiB traced for {dtype} {shape}"
