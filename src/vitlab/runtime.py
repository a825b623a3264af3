"""The device and numeric precision a model runs in: training, evaluation, serving and export alike.

"auto" precision: bf16 autocast on GPUs that support it, fp16 autocast with a gradient scaler on
GPUs that do not, and fp32 on CPU and MPS. On CPU bf16 autocast is available (`--precision bf16`)
but was measured slower for the small models one trains on a CPU (the `demo` model, a Ti/4 at 32 px);
only at ImageNet sizes did bf16 win, on a CPU with avx512_bf16. On a CPU without native bf16
(kernels.native: an AVX2-only one) bf16 is emulated and never faster than fp32; there bf16 matmuls
run as fp32 GEMMs (accel/kernels.py) rather than through ATen's slow bf16 fallback.
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import torch

from vitlab.errors import ConfigError

# The one list of each: RunSpec's fields, the --device/--precision choices and the checks below.
Device = Literal["auto", "cpu", "cuda", "mps"]
PrecisionName = Literal["auto", "bf16", "fp16", "fp32"]
DEVICES: tuple[str, ...] = typing.get_args(Device)
PRECISIONS: tuple[str, ...] = typing.get_args(PrecisionName)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}  # autocast dtype; None: no autocast


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' requested, but torch sees no CUDA GPU")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("device 'mps' requested, but torch sees no Apple GPU")
    return torch.device(name)


@dataclass(frozen=True)
class Precision:
    name: str  # bf16 | fp16 | fp32
    device: torch.device

    @property
    def dtype(self) -> torch.dtype | None:
        return DTYPES[self.name]

    @property
    def compute_dtype(self) -> torch.dtype:
        """What the model's matmuls compute in: the autocast dtype, else fp32."""
        return self.dtype or torch.float32

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """fp16 gradients underflow without loss scaling; bf16 has fp32's exponent range."""
        if self.name == "fp16" and self.device.type == "cuda":
            return torch.amp.GradScaler("cuda")
        return None


def resolve_precision(name: str, device: torch.device) -> Precision:
    if name == "auto":
        if device.type == "cuda":
            name = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        else:
            name = "fp32"
    if name == "fp16" and device.type == "cpu":
        raise ConfigError("precision 'fp16' needs a GPU; on CPU use bf16 or fp32")
    if name not in DTYPES:
        raise ConfigError(f"unknown precision {name!r}; choose one of {', '.join(PRECISIONS)}")
    return Precision(name, device)


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run a `with` block on `threads` intra-op threads (None: as set), restoring the count after."""
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
