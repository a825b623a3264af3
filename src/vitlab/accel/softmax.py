"""The softmax of eager bf16 CPU inference attention, in place over the logits (blocked.inference_attention).

ATen's kernel computes a bf16 row in fp32 and rounds it once; it takes the last len % 16 values of
each row one at a time through a scalar exp. vitlab's kernel (native.py, csrc/bf16_kernels.c)
computes the same numbers with AVX-512 throughout. It runs where native.py's conditions hold and
`choose_softmax` (called by layers.prepare) found it the faster here; a forward only reads that choice.
"""

from __future__ import annotations

import torch

from . import kernels, native

MEASURE_SHAPE = (4 * 6 * 197, 197)  # S/16's block at 224 px: 4 images x 6 heads x 197 queries, 197 keys
CHECK_COLS = (1, 15, 16, 17, 31, 197, 577)  # every tail length class, S/16's and 384 px rows

_chosen: list[bool] = []  # [] before the first call; then whether vitlab's kernel runs


def softmax_(logits: torch.Tensor) -> torch.Tensor:
    """softmax(logits, dim=-1) of bf16 / fp16 CPU logits, computed in fp32 and written over them."""
    if chosen() and native.takes(logits):
        kernel(logits)
        return logits
    if not logits.is_contiguous():  # ATen's out= over its own non-contiguous input computes wrong numbers
        return logits.copy_(torch._softmax(logits, -1, False))
    return torch._softmax(logits, -1, False, out=logits)


def kernel(logits: torch.Tensor) -> None:
    """vitlab's kernel over `logits` (native.takes them), in place."""
    library = native.library()
    assert library is not None, "vitlab's kernels do not run here"
    cols = logits.shape[-1]
    if library.vitlab_softmax_bf16(logits.data_ptr(), logits.numel() // cols, cols, native.threads(logits)) != 0:
        raise RuntimeError(f"vitlab's bf16 softmax refused rows of {cols}")


def choose_softmax() -> bool:
    """Whether vitlab's kernel runs here: it was built, computes ATen's numbers and is the faster;
    decided once per process (the build and the timing are cached per machine by native.py)."""
    if not _chosen:
        _chosen.append(native.library() is not None and native.measured_choice("softmax", disagreement, timing))
    return _chosen[0]


def chosen() -> bool:
    """What choose_softmax decided; False (ATen's kernel) where it was not asked."""
    return bool(_chosen) and _chosen[0]


def reset() -> None:
    """Forget the choice (tests fake the machine, then ask again)."""
    _chosen.clear()


def disagreement(mine=kernel) -> str | None:
    """Where `mine` is not ATen's softmax (each value within one bf16 rounding of the fp32 softmax, NaN
    where ATen's is NaN), on rows of every tail length; None where it is."""
    generator = torch.Generator().manual_seed(0)
    for cols in CHECK_COLS:
        logits = (4 * torch.randn(9, 4, cols, generator=generator)).bfloat16()
        logits[0, 1, : cols // 2] = float("-inf")  # masked keys
        logits[1, 2, -1] = float("nan")
        logits[2, 3] = float("-inf")  # a row of masked keys only: NaN, as in ATen's
        exact = logits.float().softmax(dim=-1)
        aten = logits.softmax(dim=-1)
        computed = logits.clone()
        mine(computed)
        if not torch.equal(computed.isnan(), aten.isnan()):
            return f"NaN in other places than ATen's, rows of {cols}"
        finite = ~aten.isnan()
        if not ((computed.float() - exact).abs()[finite] <= 2**-8 * exact[finite]).all():
            return f"more than one bf16 rounding from the fp32 softmax, rows of {cols}"
    return None


def timing() -> dict:
    """ATen's kernel and vitlab's at MEASURE_SHAPE (native.timed_against_aten)."""
    aten, mine = (kernels.measuring_data(*MEASURE_SHAPE).bfloat16() for _ in range(2))
    return native.timed_against_aten(lambda: torch._softmax(aten, -1, False, out=aten), lambda: kernel(mine))
