"""The softmax of eager bf16 CPU inference attention, in place over the logits (attention.inference_attention).

ATen's CPU kernel computes a bf16 row in fp32 and rounds it once to bf16; it takes the last
len % 16 values of each row one at a time through a scalar exp, and a ViT's rows are short (197
keys at 224 px: 5 such values). vitlab's kernel (csrc/softmax_bf16.c) computes the same numbers
with AVX-512 throughout, the tail under a mask. On an AMD EPYC (family 26 model 2, 2 threads) S/16's
block of 4 images (4728 rows of 197) took 0.20 ms against ATen's 0.52, and the eager bf16 forward
pass took 4% less time for S/16 (batch 16) and 9% less for Ti/16 (batch 32), interleaved.

It runs where all of this holds, else ATen's kernel does; the log says which, and why, once:
- an x86-64 CPU with AVX512_BF16 whose ATen kernels are the AVX512 ones (ATEN_CPU_CAPABILITY=avx2
  makes it an AVX2 machine here too);
- torch's threads come from libgomp: the kernel's loop runs in the same OpenMP threads as ATen's;
- a C compiler ($CC, else cc or gcc) built it; it is built once per machine into the cache folder
  (kernels.cache_file's; VITLAB_CACHE), and loaded with ctypes;
- before its first use it computed ATen's numbers on rows of every tail length, -inf and NaN
  included (within one bf16 rounding of the fp32 softmax, as ATen's are);
- timed once against ATen's at S/16's block, it was the faster; the choice is cached per CPU model,
  capability, torch version and kernel source, like the attention path (kernels.cached_measurement);
- the tensor is bf16, contiguous, its rows at most MAX_COLS long.
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

SOURCE = Path(__file__).parent / "csrc" / "softmax_bf16.c"
MAX_COLS = 16384  # the row buffer of csrc/softmax_bf16.c
ISA_FLAGS = ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mfma")
MEASURE_SHAPE = (4 * 6 * 197, 197)  # S/16's block at 224 px: 4 images x 6 heads x 197 queries, 197 keys
GRAIN = 32768  # values per thread at least (ATen's GRAIN_SIZE): smaller tensors take one thread
CHECK_COLS = (1, 15, 16, 17, 31, 197, 577)  # every tail length class, S/16's and 384 px rows

Kernel = Callable[[torch.Tensor], None]
_chosen: list[Kernel | None] = []  # [] before the first call; then [None] for ATen's, or [vitlab's]


class BuildError(RuntimeError):
    """The kernel did not compile or link here."""


def softmax_(logits: torch.Tensor) -> torch.Tensor:
    """softmax(logits, dim=-1) of bf16 / fp16 CPU logits, computed in fp32 and written over them."""
    if logits.dtype == torch.bfloat16 and logits.is_contiguous() and 0 < logits.shape[-1] <= MAX_COLS:
        kernel = chosen_kernel()
        if kernel is not None:
            kernel(logits)
            return logits
    if not logits.is_contiguous():  # ATen's out= over its own non-contiguous input computes wrong numbers
        return logits.copy_(torch._softmax(logits, -1, False))
    return torch._softmax(logits, -1, False, out=logits)


def chosen_kernel() -> Kernel | None:
    """vitlab's kernel where it runs and is the faster here (see the module docstring), else None."""
    if not _chosen:
        _chosen.append(choose_kernel())
    return _chosen[0]


def reset() -> None:
    """Forget the choice (tests fake the machine, then ask again)."""
    _chosen.clear()


def choose_kernel() -> Kernel | None:
    reason = unavailable_reason()
    if reason is None:
        try:
            return measured_choice(built_kernel(compiler(), openmp_library()))
        except BuildError as error:
            reason = f"vitlab's did not build: {error}"
    log.info("bf16 softmax: ATen's kernel (%s)", reason)
    return None


def measured_choice(mine: Kernel) -> Kernel | None:
    """`mine` where it computes ATen's numbers and is the faster of the two here, else None."""
    wrong = disagreement(mine)
    if wrong is not None:
        log.warning("vitlab's bf16 softmax kernel disagrees with ATen's here (%s): ATen's kernel instead", wrong)
        return None
    entry, how = kernels.cached_measurement(
        f"softmax bf16 {source_digest()}", "softmax", ("aten", "vitlab"), lambda: time_kernels(mine)
    )
    log.info(
        "CPU %s with AVX512_BF16: bf16 softmax by %s's kernel (%s: ATen %.3f ms, vitlab %.3f ms)",
        kernels.cpu_capability(),
        "vitlab" if entry["softmax"] == "vitlab" else "ATen",
        how,
        entry["aten_ms"],
        entry["vitlab_ms"],
    )
    return mine if entry["softmax"] == "vitlab" else None


def unavailable_reason() -> str | None:
    """Why vitlab's kernel cannot run here, or None."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"a {platform.machine()} CPU, not x86-64"
    if not kernels.cpu_capability().startswith("AVX512"):
        return f"ATen's kernels here are {kernels.cpu_capability()}"
    if not torch.cpu._is_avx512_bf16_supported():
        return "no AVX512_BF16 on this CPU"
    if openmp_library() is None:
        return "torch's threads are not libgomp's"
    if compiler() is None:
        return "no C compiler: set CC"
    return None


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
    """Where the kernel built by `cc` against `libgomp` lives: the cache folder's kernels/."""
    key = hashlib.sha256(f"{source_digest()} {cc} {libgomp}".encode()).hexdigest()[:16]
    return kernels.cache_file().parent / "kernels" / f"softmax_bf16-{key}.so"


def build(cc: str, libgomp: str) -> Path:
    """The shared library, compiled once (under a lock: one process builds, the others wait for it),
    linked against the libgomp torch has loaded, so that its OpenMP loop shares torch's threads. Its
    SHA-256 is kept beside it: a file that no longer matches is built again, never loaded (loading a
    damaged library can kill the process)."""
    library = library_path(cc, libgomp)
    digest = library.with_name(library.name + ".sha256")
    library.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{library}.lock"):
        if library.exists() and digest.exists() and digest.read_text() == file_digest(library):
            return library
        if library.exists():
            log.warning("%s does not match its SHA-256: building it again", library)
        with tempfile.TemporaryDirectory(dir=library.parent) as scratch:
            objects, shared = Path(scratch) / "softmax_bf16.o", Path(scratch) / "softmax_bf16.so"
            run_compiler([cc, "-O3", "-fPIC", "-fopenmp", *ISA_FLAGS, "-c", str(SOURCE), "-o", str(objects)])
            run_compiler([cc, "-shared", str(objects), libgomp, "-o", str(shared)])
            digest.write_text(file_digest(shared))
            os.replace(shared, library)
    return library


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def built_kernel(cc: str | None, libgomp: str | None) -> Kernel:
    """The kernel from the cache folder, built first where it is not there (or not whole)."""
    if cc is None or libgomp is None:
        raise BuildError("no C compiler or no libgomp")
    return load(build(cc, libgomp), libgomp)


def run_compiler(command: list[str]) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise BuildError(f"{command[0]}: {error}") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        raise BuildError(f"{command[0]} exited with {done.returncode}: {lines[0] if lines else 'no output'}")


def load(library: Path, libgomp: str) -> Kernel:
    """The kernel as a function of a contiguous bf16 CPU tensor, which it overwrites."""
    try:
        shared = ctypes.CDLL(str(library))
        function = shared.vitlab_softmax_bf16
    except (OSError, AttributeError) as error:
        raise BuildError(f"{library} does not load ({str(error).splitlines()[0]})") from None
    if providing_library(shared, "GOMP_parallel") != os.path.realpath(libgomp):
        raise BuildError(f"{library} runs its threads in another OpenMP runtime than torch's")
    function.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
    function.restype = ctypes.c_int

    def kernel(logits: torch.Tensor) -> None:
        cols = logits.shape[-1]
        threads = max(1, min(torch.get_num_threads(), logits.numel() // GRAIN))
        if function(logits.data_ptr(), logits.numel() // cols, cols, threads) != 0:
            raise RuntimeError(f"vitlab's bf16 softmax refused rows of {cols}")

    return kernel


def disagreement(kernel: Kernel) -> str | None:
    """Where the kernel's softmax is not ATen's (each value within one bf16 rounding of the fp32
    softmax, NaN where ATen's is NaN), on rows of every tail length; None where it is."""
    generator = torch.Generator().manual_seed(0)
    for cols in CHECK_COLS:
        logits = (4 * torch.randn(9, 4, cols, generator=generator)).bfloat16()
        logits[0, 1, : cols // 2] = float("-inf")  # masked keys
        logits[1, 2, -1] = float("nan")
        logits[2, 3] = float("-inf")  # a row of masked keys only: NaN, as in ATen's
        exact = logits.float().softmax(dim=-1)
        aten = logits.softmax(dim=-1)
        mine = logits.clone()
        kernel(mine)
        if not torch.equal(mine.isnan(), aten.isnan()):
            return f"NaN in other places than ATen's, rows of {cols}"
        finite = ~aten.isnan()
        if not ((mine.float() - exact).abs()[finite] <= 2**-8 * exact[finite]).all():
            return f"more than one bf16 rounding from the fp32 softmax, rows of {cols}"
    return None


def time_kernels(kernel: Kernel, repeats: int = 7) -> dict:
    """Best of `repeats` interleaved runs of ATen's and vitlab's kernels at MEASURE_SHAPE, in ms."""
    aten, mine = (torch.randn(MEASURE_SHAPE).bfloat16() for _ in range(2))
    best = kernels.fastest(
        {"aten": lambda: torch._softmax(aten, -1, False, out=aten), "vitlab": lambda: kernel(mine)}, repeats
    )
    faster = "vitlab" if best["vitlab"] < best["aten"] else "aten"
    return {"softmax": faster, "aten_ms": round(1e3 * best["aten"], 3), "vitlab_ms": round(1e3 * best["vitlab"], 3)}
