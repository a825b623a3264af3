"""vitlab's own bf16 CPU kernels (csrc/bf16_kernels.c): where they can run, built and loaded once.

One kernel so far, the softmax of eager bf16 inference attention (softmax.py); what building and
loading it takes is here. Nothing here is needed: where any condition below fails, ATen's kernel
runs, and only accelerate (layers.prepare) ever builds or times. It runs where all of this holds, else ATen's kernel
does; the log says which, and why, once:
- an x86-64 CPU with AVX512_BF16 whose ATen kernels are the AVX512 ones (ATEN_CPU_CAPABILITY=avx2
  makes it an AVX2 machine here too);
- torch's threads come from libgomp: the kernels' loops run in the same OpenMP threads as ATen's;
- a C compiler ($CC, else cc or gcc) built them; once per machine, into the cache folder
  (kernels.cache_file's; VITLAB_CACHE), the library's SHA-256 kept beside it, loaded with ctypes;
- before its first use the kernel computed ATen's numbers on rows of every tail length, and, timed
  once against ATen's at a ViT's shapes, it was the faster (`measured_choice`; cached per CPU model,
  capability, torch version and kernel source, like the attention path);
- the tensor is bf16, contiguous, its rows at most MAX_COLS long.

A LayerNorm kernel fused with the residual add before it was tried and left out: faster alone, it
changed nothing measurable in the whole eager model.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from filelock import FileLock

from . import kernels

log = logging.getLogger("vitlab")

SOURCE = Path(__file__).parent / "csrc" / "bf16_kernels.c"
MAX_COLS = 16384  # the row buffer of csrc/bf16_kernels.c
ISA_FLAGS = ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mfma")
GRAIN = 32768  # values per thread at least (ATen's GRAIN_SIZE): smaller tensors take one thread

_library: list[ctypes.CDLL | None] = []  # [] before the first call; then [None] where it does not run


class BuildError(RuntimeError):
    """The kernels did not compile, link or load here."""


def library() -> ctypes.CDLL | None:
    """The loaded kernels where they run here (see the module docstring), else None, the reason logged."""
    if not _library:
        reason = unavailable_reason()
        if reason is None:
            libgomp = openmp_library() or ""  # found: unavailable_reason() says so
            try:
                _library.append(load(build(compiler() or "", libgomp), libgomp))
            except (BuildError, OSError) as error:  # OSError: the cache folder cannot be written
                reason = f"vitlab's did not build: {error}"
        if reason is not None:
            log.info("bf16 softmax: ATen's kernel (%s)", reason)
            _library.append(None)
    return _library[0]


def reset() -> None:
    """Forget the library (tests fake the machine, then ask again)."""
    _library.clear()


def takes(x: torch.Tensor) -> bool:
    """Whether the kernels take `x` (bf16, contiguous, rows of 1 to MAX_COLS values)."""
    return x.dtype == torch.bfloat16 and x.is_contiguous() and 0 < x.shape[-1] <= MAX_COLS and x.device.type == "cpu"


def threads(x: torch.Tensor) -> int:
    """torch's intra-op threads, one per GRAIN values of `x` at most."""
    return max(1, min(torch.get_num_threads(), x.numel() // GRAIN))


def unavailable_reason() -> str | None:
    """Why vitlab's kernels cannot run here, every unmet condition named (a CPU below AVX-512 lacks
    more than one), or None."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"a {platform.machine()} CPU, not x86-64"
    reasons = []
    if not kernels.cpu_capability().startswith("AVX512"):
        reasons.append(f"ATen's kernels here are {kernels.cpu_capability()}")
    if not torch.cpu._is_avx512_bf16_supported():
        reasons.append("no AVX512_BF16 on this CPU")
    if openmp_library() is None:
        reasons.append("torch's threads are not libgomp's")
    if compiler() is None:
        reasons.append("no C compiler: set CC")
    return "; ".join(reasons) or None


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


class SymbolInfo(ctypes.Structure):
    """dladdr's Dl_info."""

    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def providing_library(library: ctypes.CDLL, symbol: str) -> str | None:
    """The file of the shared object that `symbol` resolves to from `library` (dlsym, then dladdr)."""
    try:
        address = ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value
        dladdr = ctypes.CDLL(None).dladdr
    except AttributeError:
        return None
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(SymbolInfo)]
    info = SymbolInfo()
    if not dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.path.realpath(info.dli_fname.decode())


def openmp_library() -> str | None:
    """The libgomp torch's own kernels run their threads in (found from libtorch_cpu), or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if line.rstrip().endswith("/libtorch_cpu.so")}
        runtime = providing_library(ctypes.CDLL(paths.pop()), "omp_get_max_threads") if paths else None
    except OSError:
        return None
    return runtime if runtime is not None and Path(runtime).name.startswith("libgomp") else None


def source_digest() -> str:
    return hashlib.sha256(SOURCE.read_bytes() + " ".join(ISA_FLAGS).encode()).hexdigest()[:16]


def library_path(cc: str, libgomp: str) -> Path:
    """Where the kernels built by `cc` against `libgomp` live: the cache folder's kernels/."""
    key = hashlib.sha256(f"{source_digest()} {cc} {libgomp}".encode()).hexdigest()[:16]
    return kernels.cache_file().parent / "kernels" / f"bf16_kernels-{key}.so"


def build(cc: str, libgomp: str) -> Path:
    """The shared library, compiled once (under a lock: one process builds, the others wait for it),
    linked against the libgomp torch has loaded, so that its OpenMP loops share torch's threads. Its
    SHA-256 is kept beside it: a file that no longer matches is built again, never loaded (loading a
    damaged library can kill the process)."""
    if not cc or not libgomp:
        raise BuildError("no C compiler or no libgomp")
    library = library_path(cc, libgomp)
    digest = library.with_name(library.name + ".sha256")
    library.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{library}.lock"):
        if library.exists() and digest.exists() and digest.read_text() == file_digest(library):
            return library
        if library.exists():
            log.warning("%s does not match its SHA-256: building it again", library)
        with tempfile.TemporaryDirectory(dir=library.parent) as scratch:
            objects, shared = Path(scratch) / "bf16_kernels.o", Path(scratch) / "bf16_kernels.so"
            run_compiler([cc, "-O3", "-fPIC", "-fopenmp", *ISA_FLAGS, "-c", str(SOURCE), "-o", str(objects)])
            run_compiler([cc, "-shared", str(objects), libgomp, "-o", str(shared)])
            digest.write_text(file_digest(shared))
            os.replace(shared, library)
    return library


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_compiler(command: list[str]) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BuildError(f"{command[0]}: {error}") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise BuildError(f"{command[0]} exited with {done.returncode}: {lines[0] if lines else 'no output'}")


def load(library: Path, libgomp: str) -> ctypes.CDLL:
    """The library, its functions' argument types declared; refused where its OpenMP is not torch's."""
    try:
        shared = ctypes.CDLL(str(library))
        softmax = shared.vitlab_softmax_bf16
    except (OSError, AttributeError) as error:
        raise BuildError(f"{library} does not load ({str(error).splitlines()[0]})") from None
    if providing_library(shared, "GOMP_parallel") != libgomp:
        raise BuildError(f"{library} runs its threads in another OpenMP runtime than torch's")
    softmax.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
    softmax.restype = ctypes.c_int
    return shared


def measured_choice(what: str, disagreement: Callable[[], str | None], timing: Callable[[], dict]) -> bool:
    """Whether vitlab's kernel for `what` runs here: it computes ATen's numbers (`disagreement` finds
    none) and was the faster, timed once (`timing`: {"faster": "aten" | "vitlab", "aten_ms", "vitlab_ms"}
    and cached)."""
    wrong = disagreement()
    if wrong is not None:
        log.warning("vitlab's bf16 %s kernel disagrees with ATen's here (%s): ATen's kernel instead", what, wrong)
        return False
    entry, how = kernels.cached_measurement(f"{what} bf16 {source_digest()}", "faster", ("aten", "vitlab"), timing)
    log.log(
        kernels.choice_level(how),
        "CPU %s with AVX512_BF16: bf16 %s by %s's kernel (%s: ATen %.3f ms, vitlab %.3f ms)",
        kernels.cpu_capability(),
        what,
        "vitlab" if entry["faster"] == "vitlab" else "ATen",
        how,
        entry["aten_ms"],
        entry["vitlab_ms"],
    )
    return entry["faster"] == "vitlab"


def timed_against_aten(aten: Callable[[], object], mine: Callable[[], object], repeats: int = 7) -> dict:
    """Best of `repeats` interleaved runs of each, in ms, and which was faster."""
    best = kernels.fastest({"aten": aten, "vitlab": mine}, repeats)
    faster = "vitlab" if best["vitlab"] < best["aten"] else "aten"
    return {"faster": faster, "aten_ms": round(1e3 * best["aten"], 3), "vitlab_ms": round(1e3 * best["vitlab"], 3)}
