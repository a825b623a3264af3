"""Which CPU kernels an accelerated model runs: chosen by what this CPU can do, never by a constant.

- `native(dtype)`: oneDNN runs bf16 (fp16) GEMMs natively here (avx512_bf16 / AMX). torch asks
  oneDNN, which honours ONEDNN_MAX_CPU_ISA.
- `widened`: where bf16 is not native, ATen's fallback bf16 GEMM is far slower than fp32, so the
  bf16 operands are widened to fp32 (exactly), multiplied by the fp32 GEMM (which accumulates in
  fp32, as oneDNN's bf16 kernels do) and the result rounded to bf16: the bf16 kernel's numbers up to
  the order of summation, at fp32's speed.
- `attention_path(dtype, device)`: PyTorch's fused attention kernel, or two matmuls around a
  softmax (blocked.blocked_attention). In fp32, and where bf16 is not native (the matmuls' bf16 bmm
  would be the slow fallback), the fused kernel. With native bf16 the two are timed once and the
  faster one is kept in a small JSON file per CPU model, capability and torch version
  ($VITLAB_CACHE, else ~/.cache/vitlab).
- `fp32_gemm()`: the library of fp32 inference GEMMs: MKL (ATen's own, which Inductor prepacks for a
  fixed batch size) or oneDNN (which it prepacks when the batch dimension is dynamic, and which
  layers.Linear calls in eager no-grad fp32). Timed once at GEMM_SHAPE and cached beside the
  attention choice: which is faster depends on the CPU (MKL takes a generic path on some AMD ones).

What CPU this is (name, family and model, capability, L2 cache): cpu.py. Every choice is logged
once per machine, as it is measured; read back from the cache file, at debug level (`vitlab -v`), so
that it does not interrupt every command's output. The choices are made by layers.prepare (which accelerate calls) and only read during a forward
(`chosen_attention_path`, `chosen_fp32_gemm`), so that a forward pass never times, writes or builds
anything; a choice not made is the plain path. Dynamo treats the choices read as constants
(assume_constant_result).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from filelock import FileLock

from . import cpu
from .cpu import cpu_capability, cpu_model, cpu_name

log = logging.getLogger("vitlab")

AttentionPath = Literal["fused", "matmul"]
GemmLibrary = Literal["mkl", "onednn"]
MatmulAttention = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]  # q, k, v, scale
HALF = (torch.bfloat16, torch.float16)
CACHE_ENV = "VITLAB_CACHE"  # the same cache folder as downloaded weights (weights/fetch.py)
MEASURE_SHAPE = (16, 3, 197, 64)  # (B, heads, T, head_dim): Ti/16 at 224 px
GEMM_SHAPE = (3152, 384, 1536)  # (rows, in, out): S/16's fc1 at 224 px, batch 16

_native: dict[torch.dtype, bool] = {}
_onednn_runs: dict[torch.dtype, bool] = {}
_attention: dict[torch.dtype, AttentionPath] = {}
_gemm: dict[str, GemmLibrary] = {}


def onednn_supports(dtype: torch.dtype) -> bool:
    """oneDNN's own word on this CPU (within ONEDNN_MAX_CPU_ISA): native bf16 / fp16 GEMMs."""
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if dtype == torch.float16:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return True


def reset() -> None:
    """Forget the choices made (tests fake the CPU, then ask again)."""
    _native.clear()
    _onednn_runs.clear()
    _attention.clear()
    _gemm.clear()
    cpu.reset()


@torch.compiler.assume_constant_result
def native(dtype: torch.dtype) -> bool:
    """Does this CPU run `dtype` GEMMs natively (fp32 always does)?"""
    if dtype not in _native:
        _native[dtype] = onednn_supports(dtype)
        if dtype in HALF and not _native[dtype]:
            log.debug(
                "CPU %s without native %s: %s matmuls run as fp32 GEMMs, fused attention kernel, fp32 default",
                cpu_capability(),
                dtype_name(dtype),
                dtype_name(dtype),
            )
    return _native[dtype]


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}.get(dtype, str(dtype))


def attention_path(dtype: torch.dtype, device: torch.device, matmul: MatmulAttention) -> AttentionPath:
    """ "fused" (F.scaled_dot_product_attention) or "matmul" (`matmul`, timed against it where in doubt)."""
    if device.type != "cpu" or dtype not in HALF or not native(dtype):
        return "fused"
    if dtype not in _attention:
        _attention[dtype] = measured_attention_path(dtype, matmul)
    return _attention[dtype]


@torch.compiler.assume_constant_result
def chosen_attention_path(dtype: torch.dtype, device: torch.device) -> AttentionPath:
    """The path `attention_path` chose for `dtype` on `device`; "fused" where it was not asked."""
    if device.type != "cpu" or dtype not in HALF or not native(dtype):
        return "fused"
    return _attention.get(dtype, "fused")


def cache_file() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "vitlab") / "cpu-kernels.json"


def machine_key(what: str) -> str:
    """A cached measurement's key: the CPU's name alone would hand one generation's choice to another."""
    return f"{cpu_name()} | {cpu_model()} | {cpu_capability()} | torch {torch.__version__} | {what}"


def read_cache(path: Path, warn: bool = True) -> dict:
    if not path.exists():
        return {}
    try:
        entries = json.loads(path.read_text())
        if not isinstance(entries, dict):
            raise ValueError("not a JSON object")
        return entries
    except (OSError, ValueError) as error:
        if warn:
            log.warning("%s is unreadable (%s): measuring again", path, str(error).splitlines()[0])
        return {}


def cached_measurement(
    what: str, field: str, choices: tuple[str, ...], measure: Callable[[], dict]
) -> tuple[dict, str]:
    """The entry for `what` on this machine (its `field` one of `choices`): from the cache file, or
    measured once and stored; and how it was obtained, for the log. A measurement may make another
    (timing the attention paths chooses the softmax kernel): the lock is one per file and reentrant.
    Where the cache folder cannot be written, measured for this process only, and the log says why."""
    path, key = cache_file(), machine_key(what)
    entry = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(path):  # one process measures; the others read its result
            cached = read_cache(path).get(key)
            if isinstance(cached, dict) and cached.get(field) in choices:
                return cached, f"measured earlier, {path}"
            entry = measure()
            entries = read_cache(path, warn=False)  # again: with what a measurement inside this one stored
            entries[key] = entry
            path.write_text(json.dumps(entries, indent=1) + "\n")
            return entry, "measured"
    except OSError as error:
        log.warning("%s cannot be written (%s): %s measured for this process only", path, error, what)
        return entry if entry is not None else measure(), "measured, not kept"


def choice_level(how: str) -> int:
    """The log level of a choice obtained as `how` says (cached_measurement): INFO when it was just
    measured, DEBUG when it was read back from the cache file."""
    return logging.DEBUG if how.startswith("measured earlier") else logging.INFO


_locks: dict[Path, FileLock] = {}


def file_lock(path: Path) -> FileLock:
    """The lock of the cache file `path`: one FileLock per file, which counts nested acquisitions."""
    return _locks.setdefault(path, FileLock(f"{path}.lock"))


def measured_attention_path(dtype: torch.dtype, matmul: MatmulAttention) -> AttentionPath:
    """The faster attention path for `dtype` here: from the cache file, or timed once and stored."""
    what = f"attention {dtype_name(dtype)}"
    entry, how = cached_measurement(what, "attention", ("fused", "matmul"), lambda: time_attention_paths(dtype, matmul))
    log.log(
        choice_level(how),
        "CPU %s with native %s: %s attention (%s: fused %.2f ms, matmul %.2f ms)",
        cpu_capability(),
        dtype_name(dtype),
        entry["attention"],
        how,
        entry["fused_ms"],
        entry["matmul_ms"],
    )
    return entry["attention"]


def fp32_gemm() -> GemmLibrary:
    """The faster library for fp32 inference GEMMs on this CPU ("mkl" where torch has no oneDNN or no
    MKL to choose between)."""
    if "fp32" not in _gemm:
        if not (torch._C.has_mkl and torch.backends.mkldnn.is_available()):
            _gemm["fp32"] = "onednn" if torch.backends.mkldnn.is_available() else "mkl"
        else:
            entry, how = cached_measurement("fp32 gemm", "gemm", ("mkl", "onednn"), time_fp32_gemms)
            _gemm["fp32"] = entry["gemm"]
            log.log(
                choice_level(how),
                "CPU %s: fp32 inference GEMMs through %s (%s: MKL %.0f, oneDNN %.0f GFLOP/s)",
                cpu_capability(),
                "oneDNN" if entry["gemm"] == "onednn" else "MKL",
                how,
                entry["mkl_gflops"],
                entry["onednn_gflops"],
            )
    return _gemm["fp32"]


@torch.compiler.assume_constant_result
def chosen_fp32_gemm() -> GemmLibrary:
    """The library `fp32_gemm` chose; "mkl" (ATen's own GEMM) where it was not asked."""
    return _gemm.get("fp32", "mkl")


def measuring_data(*shape: int) -> torch.Tensor:
    """Normal samples for a timing, from their own generator: a timing must not move the global RNG
    a training run draws its initialisation, masks and augmentations from."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def time_fp32_gemms(repeats: int = 5) -> dict:
    """Best of `repeats` interleaved fp32 GEMMs at GEMM_SHAPE through MKL (F.linear) and oneDNN."""
    rows, fan_in, fan_out = GEMM_SHAPE
    x, weight, bias = measuring_data(rows, fan_in), measuring_data(fan_out, fan_in), measuring_data(fan_out)
    runs: dict[str, Callable[[], object]] = {
        "mkl": lambda: F.linear(x, weight, bias),
        "onednn": lambda: onednn_linear(x, weight, bias),
    }
    try:
        best = fastest(runs, repeats)
    except RuntimeError as error:  # oneDNN refused the primitive on this CPU: MKL it is
        log.warning("oneDNN's fp32 linear failed here (%s): MKL", str(error).splitlines()[0])
        best = {**fastest({"mkl": runs["mkl"]}, repeats), "onednn": float("inf")}
    flop = 2 * rows * fan_in * fan_out
    faster: GemmLibrary = "onednn" if best["onednn"] < best["mkl"] else "mkl"
    return {"gemm": faster, **{f"{name}_gflops": round(flop / best[name] / 1e9, 1) for name in runs}}


def fastest(runs: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Each run's best time in seconds over `repeats` interleaved rounds after a warm-up (the best, not
    the median: a busy machine's stalls only ever add time)."""
    best = dict.fromkeys(runs, float("inf"))
    with torch.inference_mode():
        for run in runs.values():
            run()
        for _ in range(repeats):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - start)
    return best


def time_attention_paths(dtype: torch.dtype, matmul: MatmulAttention, repeats: int = 7) -> dict:
    """Best of `repeats` interleaved forward passes of each path at MEASURE_SHAPE, in ms."""
    q, k, v = measuring_data(3, *MEASURE_SHAPE).to(dtype).unbind(0)
    scale = MEASURE_SHAPE[-1] ** -0.5
    paths: dict[str, Callable[[], object]] = {
        "fused": lambda: F.scaled_dot_product_attention(q, k, v),
        "matmul": lambda: matmul(q, k, v, scale),
    }
    best = fastest(paths, repeats)
    faster: AttentionPath = "matmul" if best["matmul"] < best["fused"] else "fused"
    return {"attention": faster, "fused_ms": round(1e3 * best["fused"], 3), "matmul_ms": round(1e3 * best["matmul"], 3)}


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype an op on `x` computes in: autocast's on CPU when it is on, else x's."""
    if x.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
        return torch.get_autocast_dtype("cpu")
    return x.dtype


def widened(op: Callable[..., torch.Tensor], x: torch.Tensor, *params: torch.Tensor | None) -> torch.Tensor:
    """op(x, *params) in x's compute dtype; where that is bf16 / fp16 without native kernels, on the
    operands rounded to it, widened to fp32, and the result rounded back (see the module docstring)."""
    dtype = compute_dtype(x)
    if x.device.type != "cpu" or dtype not in HALF or native(dtype):
        return op(x, *params)
    wide = [None if p is None else p.to(dtype).float() for p in params]
    with torch.autocast("cpu", enabled=False):
        return op(x.to(dtype).float(), *wide).to(dtype)


def eager_cpu(x: torch.Tensor) -> bool:
    """`x` on the CPU outside the compilers (torch.compile and torch.export, the TorchScript ONNX
    exporter), which choose their own kernels."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling() and not torch.jit.is_tracing()


def eager_cpu_inference(x: torch.Tensor) -> bool:
    """eager_cpu, and outside autograd and autocast."""
    return eager_cpu(x) and not torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu")


def compiled_cpu_inference(x: torch.Tensor) -> bool:
    """`x` on the CPU while torch.compile traces (not torch.export), outside autograd and autocast:
    where Inductor chooses the kernels of a frozen inference graph (vitlab.optimize_for_inference)."""
    return (
        x.device.type == "cpu"
        and torch.compiler.is_compiling()
        and not torch.compiler.is_exporting()
        and not torch.is_grad_enabled()
        and not torch.is_autocast_enabled("cpu")
    )


def eager_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """A GEMM run eagerly (no autograd, autocast or compiler, which packs its own) on the CPU through
    oneDNN's linear, bias (and GELU, Linear.gelu) in its epilogue: fp32 where fp32_gemm chose oneDNN,
    bf16 / fp16 where this CPU runs them natively. ATen's addmm first copies the bias into the
    output and GELU then makes one more pass over it. The weight is reordered into oneDNN's layout
    on every call: a copy kept in that layout would be faster, but a weight changed through `.data`
    (`p.data -= lr * p.grad`) moves no version counter, so the copy would go stale without a word."""
    if not (x.dtype == weight.dtype and eager_cpu_inference(x)):
        return False
    if x.dtype in HALF:
        return native(x.dtype) and onednn_linear_runs(x.dtype)
    return x.dtype == torch.float32 and chosen_fp32_gemm() == "onednn"


def onednn_linear_runs(dtype: torch.dtype) -> bool:
    """Whether oneDNN's linear takes `dtype` operands here, asked once with a 1 x 1 GEMM: where it
    has no kernel for them (bf16 below AVX-512, or under a lower ONEDNN_MAX_CPU_ISA) it refuses to
    create the primitive, and the plain path runs instead; the log says so."""
    if dtype not in _onednn_runs:
        one = torch.ones(1, 1, dtype=dtype)
        try:
            with torch.inference_mode():
                onednn_linear(one, one, None)
            _onednn_runs[dtype] = True
        except RuntimeError as error:
            _onednn_runs[dtype] = False
            log.info(
                "oneDNN's %s linear does not run here (%s): ATen's linear instead",
                dtype_name(dtype),
                str(error).splitlines()[0].split(". ")[0],
            )
    return _onednn_runs[dtype]


def onednn_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str = "none", approximate: str = ""
) -> torch.Tensor:
    """F.linear(x, weight, bias) by oneDNN, `activation` ("none" or "gelu", `approximate` its variant)
    in the GEMM's epilogue; where eager_onednn."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, activation, [], approximate)
