"""The bf16 softmax of eager CPU inference attention (vitlab.accel.softmax) and the building of vitlab's
own kernels (vitlab.accel.native): vitlab's kernel computes ATen's numbers, runs only where it was
built, checked and measured faster, and ATen's runs elsewhere."""

from __future__ import annotations

import json
import logging

import pytest
import torch

import vitlab
from vitlab.accel import accelerate, blocked, kernels, native, softmax


@pytest.fixture(autouse=True)
def _fresh_choices(monkeypatch, tmp_path):
    monkeypatch.setenv(kernels.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(native, "_library", [])
    monkeypatch.setattr(softmax, "_chosen", [])


def skip_unless_the_kernels_run_here() -> None:
    reason = native.unavailable_reason()
    if reason is not None:
        pytest.skip(f"vitlab's kernels do not run here: {reason}")


def loaded() -> None:
    skip_unless_the_kernels_run_here()
    assert native.library() is not None


def atens(logits: torch.Tensor) -> torch.Tensor:
    return torch._softmax(logits.clone(), -1, False)


@pytest.mark.unit
@pytest.mark.parametrize("cols", [1, 7, 16, 33, 197, 577, 4097, native.MAX_COLS])
def test_the_kernel_computes_atens_softmax(cols):
    """Within one bf16 rounding of the fp32 softmax, as ATen's kernel is, and ATen's own value
    almost everywhere; the same with one thread and with two."""
    loaded()
    logits = (6 * torch.randn(3, max(1, 40_000 // cols), cols)).bfloat16()
    logits[0, 0, : cols // 2] = float("-inf")
    exact, aten = logits.float().softmax(dim=-1), atens(logits)
    mine = logits.clone()
    softmax.kernel(mine)
    assert ((mine.float() - exact).abs() <= 2**-8 * exact).all()
    assert (mine != aten).float().mean() < 1e-3
    assert mine.sum(dim=-1).float().sub(1).abs().max() < 2**-5
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = logits.clone()
        softmax.kernel(alone)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(alone, mine)


@pytest.mark.unit
def test_a_kernel_that_is_not_atens_is_refused(caplog):
    """The check before first use fails a kernel that rounds twice, one that skips the rows' tails and
    one that loses a NaN; the check of vitlab's own kernel passes."""

    def pure_bf16(logits):  # exp and sum rounded to bf16 before dividing
        exps = (logits.float() - logits.float().amax(-1, keepdim=True)).exp().bfloat16()
        logits.copy_(exps / exps.float().sum(-1, keepdim=True).bfloat16())

    def no_tail(logits):
        full = logits.shape[-1] - logits.shape[-1] % 16
        logits[..., :full] = torch.softmax(logits[..., :full].float(), -1).bfloat16()

    def nan_to_zero(logits):
        logits.copy_(torch.softmax(logits.float(), -1).nan_to_num(0.0).bfloat16())

    for wrong, says in [(pure_bf16, "rounding"), (no_tail, "rows of 1"), (nan_to_zero, "NaN")]:
        problem = softmax.disagreement(wrong)
        assert problem is not None and says in problem, (wrong.__name__, problem)
        with caplog.at_level(logging.WARNING, logger="vitlab"):
            assert not native.measured_choice("softmax", lambda found=problem: found, softmax.timing)
    assert len(caplog.records) == 3 and all("ATen's kernel instead" in r.getMessage() for r in caplog.records)
    loaded()
    assert softmax.disagreement() is None


@pytest.mark.unit
def test_atens_kernel_runs_where_vitlabs_cannot_and_the_log_says_why(monkeypatch, caplog):
    logits = torch.randn(4, 197).bfloat16()
    fakes = [
        (lambda m: m.setattr(native.platform, "machine", lambda: "aarch64"), "not x86-64"),
        (lambda m: m.setattr(kernels, "cpu_capability", lambda: "AVX2"), "are AVX2"),
        (lambda m: m.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False), "no AVX512_BF16"),
        (lambda m: m.setattr(native, "openmp_library", lambda: None), "not libgomp's"),
        (lambda m: m.setattr(native, "compiler", lambda: None), "no C compiler"),
    ]
    for fake, says in fakes:
        with monkeypatch.context() as patched:
            fake(patched)
            native.reset()
            softmax.reset()
            caplog.clear()
            with caplog.at_level(logging.INFO, logger="vitlab"):
                assert not softmax.choose_softmax()
                assert torch.equal(softmax.softmax_(logits.clone()), atens(logits)), says
                softmax.softmax_(logits.clone())
            said = [r.getMessage() for r in caplog.records]
            assert len(said) == 1 and "ATen's kernel" in said[0] and says in said[0], (says, said)


@pytest.mark.unit
@pytest.mark.fault("kernel-build", kinds=2)
def test_a_compiler_that_fails_leaves_atens_kernel_and_a_damaged_library_is_built_again(monkeypatch, caplog, tmp_path):
    skip_unless_the_kernels_run_here()  # and nothing loaded: the library is damaged below
    broken = tmp_path / "cc"
    broken.write_text("#!/bin/sh\necho 'cc: error: something is wrong' >&2\nexit 3\n")
    broken.chmod(0o755)
    monkeypatch.setenv("CC", str(broken))
    logits = torch.randn(8, 197).bfloat16()
    with caplog.at_level(logging.INFO, logger="vitlab"):
        assert not softmax.choose_softmax()
        assert torch.equal(softmax.softmax_(logits.clone()), atens(logits))
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "did not build" in said[0] and "exited with 3: cc: error" in said[0], said

    monkeypatch.delenv("CC")
    cc, libgomp = native.compiler(), native.openmp_library()
    library = native.library_path(cc, libgomp)
    native.build(cc, libgomp)
    library.write_bytes(library.read_bytes()[:4096])  # cut short, as by a full disk
    native.reset()
    softmax.reset()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        softmax.choose_softmax()
        mine = softmax.softmax_(logits.clone())
    assert [r.getMessage() for r in caplog.records] == [f"{library} does not match its SHA-256: building it again"]
    exact = logits.float().softmax(-1)
    assert ((mine.float() - exact).abs() <= 2**-8 * exact).all() and native.library() is not None


@pytest.mark.unit
@pytest.mark.fault("cache", kinds=1)
def test_a_cache_folder_that_cannot_be_written_leaves_atens_kernel_and_says_why(monkeypatch, tmp_path, caplog):
    skip_unless_the_kernels_run_here()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(kernels.CACHE_ENV, str(blocker / "cache"))
    logits = torch.randn(8, 197).bfloat16()
    with caplog.at_level(logging.INFO, logger="vitlab"):
        assert not softmax.choose_softmax()
        assert torch.equal(softmax.softmax_(logits.clone()), atens(logits))
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "ATen's kernel" in said[0] and "did not build" in said[0] and "a-file" in said[0], said


@pytest.mark.unit
def test_the_choice_is_measured_once_cached_and_atens_where_it_was_faster(monkeypatch, tmp_path):
    loaded()
    timed = []

    def timing():
        timed.append(1)
        return {"faster": "aten", "aten_ms": 0.1, "vitlab_ms": 0.2}

    monkeypatch.setattr(softmax, "timing", timing)
    assert not softmax.choose_softmax() and len(timed) == 1
    softmax.reset()
    assert not softmax.choose_softmax() and len(timed) == 1  # read back, not timed again
    entries = json.loads((tmp_path / "cpu-kernels.json").read_text())
    assert entries[kernels.machine_key(f"softmax bf16 {native.source_digest()}")]["faster"] == "aten"


@pytest.mark.unit
def test_a_measurement_made_inside_another_keeps_both():
    """Timing the attention paths runs the matmul path, which chooses the softmax kernel: both
    entries reach the cache file, and the lock taken twice does not deadlock."""
    inner = lambda: kernels.cached_measurement("inner", "k", ("a",), lambda: {"k": "a"})[0]  # noqa: E731
    outer = kernels.cached_measurement("outer", "k", ("b",), lambda: {"k": "b", "inner": inner()["k"]})[0]
    assert outer == {"k": "b", "inner": "a"}
    entries = json.loads(kernels.cache_file().read_text())
    assert entries[kernels.machine_key("inner")] == {"k": "a"} and entries[kernels.machine_key("outer")] == outer


@pytest.mark.integration
def test_eager_bf16_inference_attention_runs_the_chosen_kernel_and_only_there(monkeypatch):
    calls = []
    images = torch.randn(3, 3, 32, 32).bfloat16()
    matmul = kernels.attention_path(torch.bfloat16, images.device, blocked.blocked_attention) == "matmul"
    model = accelerate(vitlab.create_model("Ti/16", num_classes=5, image_size=32).eval().bfloat16(), torch.bfloat16)
    monkeypatch.setattr(softmax, "_chosen", [True])
    monkeypatch.setattr(softmax, "kernel", lambda logits: calls.append(tuple(logits.shape)) or atens(logits))
    with torch.no_grad():
        model(images)
    assert bool(calls) == matmul and all(shape[-1] == 5 for shape in calls)  # 4 patches and the class token
    calls.clear()
    model(images)  # with autograd: the training path's softmax
    transposed = torch.randn(6, 5).bfloat16().t()  # not contiguous
    half = torch.randn(6, 5).half()
    for logits in (transposed, half):
        assert torch.equal(softmax.softmax_(logits.clone()), atens(logits))
    assert calls == []


@pytest.mark.unit
def test_a_model_with_vitlabs_kernel_gives_the_logits_it_gives_with_atens(monkeypatch):
    loaded()
    model = accelerate(vitlab.create_model("S/16", num_classes=10, image_size=64).eval().bfloat16(), torch.bfloat16)
    torch.nn.init.normal_(model.head.weight, std=0.5)
    images = torch.randn(5, 3, 64, 64).bfloat16()
    logits = {}
    for name, chosen in (("aten", False), ("vitlab", True)):
        monkeypatch.setattr(softmax, "_chosen", [chosen])
        with torch.no_grad():
            logits[name] = model(images).float()
    assert logits["aten"].abs().max() > 0.5
    torch.testing.assert_close(logits["vitlab"], logits["aten"], rtol=2**-6, atol=2**-6 * logits["aten"].abs().max())


@pytest.mark.unit
def test_every_missing_condition_is_named_in_one_line(monkeypatch):
    monkeypatch.setattr(native.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(kernels, "cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(native, "openmp_library", lambda: None)
    monkeypatch.setattr(native, "compiler", lambda: None)
    assert native.unavailable_reason() == (
        "ATen's kernels here are AVX2; no AVX512_BF16 on this CPU; torch's threads are not libgomp's; "
        "no C compiler: set CC"
    )
