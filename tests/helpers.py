"""What the tests share: paths, random weights, tiny training runs, image and dataset files written in
their real formats, the command line's one-line errors, and what a tree of processes is doing (/proc).

Test files import from here, never from one another.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import resource
import signal
import socket
import struct
import subprocess
import sys
import tarfile
import threading
import time
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from vitlab.training import Callback, TrainConfig, get_recipe
from vitlab.training import checkpoint as ckpt
from vitlab.training.config import apply_mapping

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "tests" / "fixtures"  # files kept in the repository (see each folder's README)
VIT_JAX_FIXTURE = FIXTURES / "vit_jax"
TOLERANCE = dict(rtol=1e-5, atol=1e-5)  # the bar for fp32 logits against a peer


# Headless Chromium: Debian's, which `make browser` installs; Playwright drives it, never downloads one.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def require_chromium() -> None:
    """Skips a browser test, saying why, where chromium is missing; fails it in CI, which must run every one."""
    if CHROMIUM.exists():
        return
    reason = f"{CHROMIUM} is missing: `make browser` installs Debian's chromium (apt-get, as root)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI runs the browser tests and does not skip them", pytrace=False)
    pytest.skip(reason)


# -- models and weights --------------------------------------------------------------------------------
def randomise_(module: torch.nn.Module, std: float = 0.2) -> torch.nn.Module:
    """Give every parameter random values so that every sub-layer (zero-initialised heads too) matters."""
    generator = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * std)
    return module


def images(height: int = 32, width: int | None = None, batch: int = 2, channels: int = 3) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7)
    return torch.randn(batch, channels, height, width or height, generator=generator)


def random_eval(module: torch.nn.Module) -> torch.nn.Module:
    """Random values in every parameter (zero-initialised heads would hide mistakes), eval mode."""
    return randomise_(module).eval()


def timm_vits(pattern: str, has: Callable[[torch.nn.Module], bool]) -> list[str]:
    """timm's registered VisionTransformer models matching `pattern` whose meta-device build `has` a part."""
    import timm

    names = []
    for name in timm.list_models(pattern):
        if timm.models.model_entrypoint(name).__module__ != "timm.models.vision_transformer":
            continue
        with torch.device("meta"):
            if has(timm.create_model(name, pretrained=False)):
                names.append(name)
    return names


def timm_folder(peer: torch.nn.Module, name: str, folder: Path, model_args: dict[str, Any], num_classes: int) -> str:
    """What timm's save_for_hf writes: config.json naming the architecture with the arguments that
    rebuild this instance, and model.safetensors."""
    folder.mkdir()
    document = {"architecture": name, "num_classes": num_classes, "model_args": dict(model_args)}
    (folder / "config.json").write_text(json.dumps(document))
    save_state_dict(peer, folder / "model.safetensors")
    return str(folder)


def save_state_dict(module: torch.nn.Module, path: Path) -> Path:
    """A peer's state dict as the peer's users store it: .safetensors, or a .pth pickle."""
    state = {key: value.detach().contiguous() for key, value in module.state_dict().items()}
    if path.suffix == ".safetensors":
        save_file(state, str(path))
    else:
        torch.save(state, path)
    return path


class MarkerPayload:
    """Unpickling this object calls open(marker, "w"): a stand-in for arbitrary code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


# -- training ------------------------------------------------------------------------------------------
TINY: dict[str, dict[str, Any]] = {
    "model": {"variant": "mu/4", "image_size": 8},
    "data": {"source": "digits", "batch_size": 32},
    "schedule": {"steps": 20, "warmup_steps": 5},
    "run": {"eval_every": 10, "threads": 1, "log_every": 10},
}

# The same as command-line flags, for tests that go through `vitlab train`.
TINY_FLAGS = [
    "--recipe",
    "small-data",
    "--model",
    "mu/4",
    "--image-size",
    "8",
    "--data",
    "digits",
    "--batch-size",
    "32",
    "--steps",
    "20",
    "--eval-every",
    "10",
    "--threads",
    "1",
    "--set",
    "schedule.warmup_steps=5",
]


def tiny_config(out: Path, recipe: str = "small-data", **sections: dict[str, Any]) -> TrainConfig:
    """`recipe` (small-data: AdamW, RandAugment, Mixup/CutMix, drop path) shrunk to run in about a second."""
    config = apply_mapping(get_recipe(recipe), TINY, "tiny")
    config = apply_mapping(config, sections, "test")
    config.run.out = str(out)
    return config


def state_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def assert_bitwise_equal(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> None:
    assert first.keys() == second.keys()
    different = [name for name in first if not torch.equal(first[name], second[name])]
    assert not different, f"tensors differ: {different[:5]}"


def assert_same_state(a: dict, b: dict, where: str = "") -> None:
    """Nested dicts/lists of tensors and numbers, compared bitwise."""
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same_state(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), f"{where} differs"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def final_state(out: Path) -> dict:
    """What must not depend on interruptions: the learned state of the last checkpoint."""
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(out))
    return {
        key: state[key]
        for key in (
            "step",
            "epoch",
            "batch_in_epoch",
            "model",
            "optimizer",
            "scheduler",
            "ema",
            "loss_sum",
            "loss_count",
            "rng",
        )
    }


class SignalAt(Callback):
    """Sends this process `signum` after optimiser step `step`, as a user's Ctrl-C or a scheduler would."""

    def __init__(self, step: int, signum: int = signal.SIGTERM) -> None:
        self.step, self.signum = step, signum

    def on_step_end(self, trainer, loss):
        if trainer.step == self.step:
            os.kill(os.getpid(), self.signum)


# -- data: image folders, CIFAR releases, odd and bad image files ----------------------------------------
def write_class_folders(root: Path, classes: dict[str, int], size: int = 8) -> list[Path]:
    """classes: name -> number of images; each class a distinct solid grey level, written as PNG."""
    paths = []
    for label, (name, count) in enumerate(classes.items()):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            path = root / name / f"{i:05d}.png"
            Image.new("RGB", (size, size), (label * 40, label * 40, label * 40)).save(path)
            paths.append(path)
    return paths


def write_cifar(root: Path, kind: str, per_batch: int = 6, seed: int = 0) -> Path:
    """A small CIFAR release in the official layout: protocol-2 pickles of uint8 (N, 3072) rows."""
    rng = np.random.default_rng(seed)
    if kind == "cifar10":
        folder, batches, test, meta = (
            root / "cifar-10-batches-py",
            [f"data_batch_{i}" for i in range(1, 6)],
            "test_batch",
            "batches.meta",
        )
        label_key, names = "labels", {"label_names": [f"class{i}" for i in range(10)]}
    else:
        folder, batches, test, meta = root / "cifar-100-python", ["train"], "test", "meta"
        label_key, names = (
            "fine_labels",
            {
                "fine_label_names": [f"fine{i}" for i in range(100)],
                "coarse_label_names": [f"coarse{i}" for i in range(20)],
            },
        )
    folder.mkdir(parents=True)
    classes = len(next(iter(names.values())))
    for name in batches + [test]:
        batch = {
            "batch_label": name,
            "data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
            label_key: rng.integers(0, classes, per_batch).tolist(),
            "filenames": [f"img{i}.png" for i in range(per_batch)],
        }
        if kind == "cifar100":
            batch["coarse_labels"] = rng.integers(0, 20, per_batch).tolist()
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    (folder / meta).write_bytes(pickle.dumps(names, protocol=2))
    return folder


def encode(image: Image.Image, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def noise(size=(24, 16), mode="RGB", seed=0) -> Image.Image:
    rng = np.random.default_rng(seed)
    channels = len(mode) if mode in ("RGB", "RGBA", "CMYK") else 1
    pixels = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    return Image.fromarray(pixels.squeeze(-1) if channels == 1 else pixels, mode)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims width x height pixels (1-bit grey), with a tiny IDAT: a bomb's header."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def exif_rotated_jpeg() -> bytes:
    """A 24 x 16 JPEG whose EXIF orientation 6 says "rotate 90 degrees clockwise to display"."""
    exif = Image.Exif()
    exif[0x0112] = 6
    return encode(noise(), "JPEG", exif=exif)


def palette_with_transparency() -> bytes:
    image = Image.new("P", (4, 4), 0)
    image.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)  # index 0 red, index 1 blue
    image.putpixel((0, 0), 1)
    return encode(image, "PNG", transparency=1)  # blue is transparent


def rgba_half_transparent() -> bytes:
    image = Image.new("RGBA", (4, 4), (255, 0, 0, 255))
    image.putpixel((0, 0), (0, 0, 255, 0))
    return encode(image, "PNG")


def sixteen_bit_grey() -> bytes:
    pixels = np.array([[0, 32768, 65535, 257]], dtype=np.uint16)
    return encode(Image.fromarray(pixels), "PNG")


def animated_gif() -> bytes:
    frames = [Image.new("RGB", (8, 8), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    return encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)


# file name -> bytes: valid but unusual images, each must decode to RGB and be used.
ODD_IMAGES = {
    "png_named_as.jpg": lambda: encode(noise(), "PNG"),
    "one_pixel.png": lambda: encode(Image.new("RGB", (1, 1), (10, 20, 30)), "PNG"),
    "grey.jpg": lambda: encode(noise(mode="L"), "JPEG"),
    "bilevel.bmp": lambda: encode(noise(mode="L").convert("1"), "BMP"),
    "palette_transparent.png": palette_with_transparency,
    "rgba.png": rgba_half_transparent,
    "grey_alpha.png": lambda: encode(noise(mode="L").convert("LA"), "PNG"),
    "cmyk.jpg": lambda: encode(Image.new("CMYK", (8, 8), (0, 0, 0, 0)), "JPEG"),
    "sixteen_bit.png": sixteen_bit_grey,
    "exif_rotated.jpg": exif_rotated_jpeg,
    "animated.gif": animated_gif,
    "photo.tiff": lambda: encode(noise(), "TIFF"),
    "photo.webp": lambda: encode(noise(), "WEBP"),
}


def truncated(data: bytes, keep: float = 0.6) -> bytes:
    return data[: int(len(data) * keep)]


# file name -> (bytes, words the reason must contain): each must be refused with BadImageError.
BAD_IMAGES = {
    "empty.jpg": (lambda: b"", "empty"),
    "truncated.jpg": (lambda: truncated(encode(noise((32, 32)), "JPEG", quality=95)), "truncated"),
    "truncated.png": (lambda: truncated(encode(noise((32, 32)), "PNG")), "truncated"),
    "text_not_image.png": (lambda: b"this is a caption, not a picture\n" * 4, "not an image"),
    "drawing.svg": (lambda: b'<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"/>', "not an image"),
    "phone.heic": (lambda: b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00heicmif1" + b"\0" * 64, "not an image"),
    "vector.eps": (lambda: encode(noise(mode="L"), "EPS"), "not an image"),  # would need Ghostscript
    "bomb.png": (lambda: png_header_only(20_000, 20_000), "decompression bomb"),  # > 2x the limit: PIL error
    "mild_bomb.png": (lambda: png_header_only(10_000, 10_000), "decompression bomb"),  # 1-2x: PIL only warns
    "garbage.jpg": (lambda: b"\xff\xd8\xff\xe0" + bytes(range(256)) * 3, ""),
}


# -- the command line ---------------------------------------------------------------------------------
# -- what a block of code does outside the process -----------------------------------------------
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
OUTSIDE_EVENTS = ("subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "ctypes.dl")
CHANGING_EVENTS = ("os.mkdir", "os.rename", "os.replace", "os.remove", "os.rmdir", "os.unlink", "os.chmod")
_watching: list[list[str]] = []


def _audit(event: str, args: tuple) -> None:
    if not _watching:
        return
    seen = None
    if event == "open":
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & WRITE_FLAGS)
        seen = f"open {path!r} for writing" if writes else None
    elif event.startswith(OUTSIDE_EVENTS) or event.startswith(CHANGING_EVENTS):
        seen = f"{event} {args[:2]!r}"
    if seen is not None:
        for found in _watching:
            found.append(seen)


@contextlib.contextmanager
def side_effects() -> Iterator[list[str]]:
    """Inside the block, each file opened for writing, file changed, process started and native
    library loaded, as "event args" lines (sys.addaudithook; the hook, which cannot be removed, is
    added once and does nothing outside such a block)."""
    if _audit not in _hooks:
        sys.addaudithook(_audit)
        _hooks.append(_audit)
    found: list[str] = []
    _watching.append(found)
    try:
        yield found
    finally:
        _watching[:] = [watched for watched in _watching if watched is not found]


_hooks: list = []


def bare_machine(monkeypatch, tmp_path: Path) -> Path:
    """A read-only cache folder (VITLAB_CACHE, returned) and a PATH without a C compiler (nor anything
    else), CC unset; the folder is made writable again by the caller's cleanup (tmp_path's)."""
    cache = tmp_path / "read-only-cache"
    cache.mkdir()
    cache.chmod(0o500)
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("VITLAB_CACHE", str(cache))
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CC", raising=False)
    return cache


def one_line_error(capsys, argv: list[str]) -> str:
    """Run `vitlab ARGV`; it must fail with status 2 and a single line on stderr, which is returned
    (argparse's refusal of a flag's value exits with that status instead of returning it)."""
    from vitlab.cli import main

    try:
        status = main(argv)
    except SystemExit as exit:
        status = exit.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("vitlab ")]
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- the web demo in a process of its own -------------------------------------------------------------------
def free_port() -> int:
    """A loopback port that was free a moment ago (the kernel's next ephemeral one), for a server to bind."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def serving(
    command: list[str], checkpoint: Path, log_path: Path, *, cwd: Path, env: dict | None = None, start_timeout_s=120
) -> Iterator[str]:
    """`COMMAND serve --ckpt CHECKPOINT` on a free loopback port (COMMAND: e.g. [python, -m, vitlab]);
    yields its base URL once `GET /` answers, and stops it at the end."""
    import httpx

    port = free_port()
    with log_path.open("w") as log:
        argv = [*command, "serve", "--ckpt", str(checkpoint), "--port", str(port)]
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + start_timeout_s
        try:
            while True:
                assert process.poll() is None, f"vitlab serve exited with {process.returncode}: {log_path.read_text()}"
                try:
                    if httpx.get(base + "/", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"vitlab serve did not answer within {start_timeout_s} s"
                time.sleep(0.5)
            yield base
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# -- processes, read from Linux's /proc: their children, the addresses they listen on ----------------------
HAS_PROC = Path("/proc/self/task").is_dir() and Path("/proc/net/tcp").is_file()


def children(pid: int) -> list[int]:
    """Direct children of `pid`, oldest (lowest id) first; none once it has exited."""
    try:
        return sorted(int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
    except (FileNotFoundError, ProcessLookupError):
        return []


def tree(pids: list[int]) -> list[int]:
    found, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children(pid)
    return found


def _address(hex_address: str) -> str:
    """/proc/net/tcp{,6} "0100007F:1F90" -> "127.0.0.1" (each 32-bit word is in host byte order)."""
    host = bytes.fromhex(hex_address.split(":")[0])
    words = b"".join(host[i : i + 4][::-1] for i in range(0, len(host), 4))
    return socket.inet_ntop(socket.AF_INET if len(words) == 4 else socket.AF_INET6, words)


def listening_addresses(pids: list[int]) -> set[tuple[str, int]]:
    """(host, port) of every TCP socket in state LISTEN held open by one of `pids`."""
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # exited meanwhile
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.add((_address(fields[1]), int(fields[1].split(":")[1], 16)))
    return found


class ListenerWatch:
    """Samples, in a thread, the listening addresses of some processes and their descendants."""

    def __init__(self, pids: list[int], every_s: float = 0.2) -> None:
        self.pids, self.every_s = pids, every_s
        self.seen: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.seen |= listening_addresses(tree(self.pids))

    def __enter__(self) -> ListenerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


# -- what a reader costs: traced memory, under a cap on the address space ---------------------------------
SMALL_INPUT_PEAK = 64 * 2**20  # what reading a file of a few KB may cost, whatever the memory limit


def virtual_size() -> int:
    """This process's address space now (VmSize of /proc/self/status), in bytes."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmSize:"))
    return int(line.split()[1]) * 1024


@contextlib.contextmanager
def memory_cap(extra: int = 2**30) -> Iterator[None]:
    """Cap the address space at what this process holds now plus `extra` bytes, so that a reader
    that believes a lying header fails with MemoryError instead of taking the machine's memory."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = min(limit for limit in (virtual_size() + extra, soft, hard) if limit != resource.RLIM_INFINITY)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))  # never above a cap already in force
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def traced_peak(function: Callable[[], Any]) -> tuple[BaseException | None, int]:
    """Run `function` under tracemalloc and a memory cap: (what it raised or None, peak bytes traced)."""
    tracemalloc.start()
    try:
        with memory_cap():
            function()
        raised = None
    except Exception as error:
        raised = error
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return raised, peak


# -- files whose headers lie about their size ----------------------------------------------------------------
def lying_npy(shape: tuple[int, ...], dtype: str = "<f4", data: bytes = b"\0" * 16) -> bytes:
    """An .npy whose header declares `shape` of `dtype`, followed by `data` (whatever its length)."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buffer.getvalue() + data


def lying_npz(path: Path, shape: tuple[int, ...], dtype: str = "<f4", data: bytes = b"\0" * 16) -> Path:
    """An .npz holding one member, embedding/kernel, with lying_npy's header."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("embedding/kernel.npy", lying_npy(shape, dtype, data))
    return path


class ForgedArray:
    """Pickles as numpy pickles an array (_reconstruct, then BUILD with its state), with any declared
    shape and any bytes of data."""

    def __init__(self, shape: tuple, raw: bytes, dtype: str = "u1") -> None:
        self.shape, self.raw, self.dtype = shape, raw, dtype

    def __reduce__(self):
        state = (1, self.shape, np.dtype(self.dtype), False, self.raw)
        return (np.ndarray.__reduce__(np.zeros(0, np.uint8))[0], (np.ndarray, (0,), b"b"), state)


class ArrayCall:
    """Pickles as a call of numpy.ndarray(shape, dtype): uninitialised memory of any size."""

    def __init__(self, shape: tuple, dtype: str = "u1") -> None:
        self.shape, self.dtype = shape, dtype

    def __reduce__(self):
        return (np.ndarray, (self.shape, np.dtype(self.dtype)))


def tar_member(name: str, data: bytes, declared: int | None = None, kind: bytes = tarfile.REGTYPE) -> bytes:
    """One tar member: a header declaring `declared` bytes (len(data) by default), then `data` padded
    to the block size, whatever the declared size."""
    info = tarfile.TarInfo(name)
    info.size, info.type = len(data) if declared is None else declared, kind
    padding = -len(data) % tarfile.BLOCKSIZE
    return info.tobuf(format=tarfile.GNU_FORMAT) + data + b"\0" * padding


def shard(path: Path, members: list[bytes], end: bool = True) -> Path:
    """A tar file of `members` (tar_member's), ended by tar's two zero blocks unless `end` is False."""
    path.write_bytes(b"".join(members) + (b"\0" * 2 * tarfile.BLOCKSIZE if end else b""))
    return path


def gnu_sparse_member(name: str, real_size: int) -> bytes:
    """A GNU sparse member: one byte of data that stands for a file of `real_size` bytes (holes)."""
    info = tarfile.TarInfo(name)
    info.type, info.size = tarfile.GNUTYPE_SPARSE, 1
    header = bytearray(info.tobuf(format=tarfile.GNU_FORMAT))
    # The old GNU sparse map (offset 386): one (offset, numbytes) pair; the real size at 483.
    header[386:398] = tarfile.itn(real_size - 1, 12, tarfile.GNU_FORMAT)
    header[398:410] = tarfile.itn(1, 12, tarfile.GNU_FORMAT)
    header[483:495] = tarfile.itn(real_size, 12, tarfile.GNU_FORMAT)
    header[148:156] = b"        "  # the checksum is of the header with spaces in its place
    header[148:156] = b"%06o\0 " % sum(header[:512])
    return bytes(header) + b"x" + b"\0" * (tarfile.BLOCKSIZE - 1)


# -- the Hugging Face Hub, recorded instead of reached ----------------------------------------------------
class HubCall(NamedTuple):
    """One call push made on huggingface_hub's HfApi: its name and keyword arguments; for upload_folder,
    a copy of the folder taken while it existed."""

    name: str
    arguments: dict[str, Any]
    copy: Path | None = None


def record_hub_calls(monkeypatch: pytest.MonkeyPatch, copies: Path) -> list[HubCall]:
    """Replace vitlab's HfApi with one that records each call (copying uploaded folders under `copies`)
    and sends nothing; returns the list the calls are appended to. Each call is bound to the real
    HfApi method's signature first, so that an argument huggingface_hub does not take fails the test."""
    import inspect
    import shutil

    from huggingface_hub import HfApi

    calls: list[HubCall] = []

    def record(name: str, *args: Any, **options: Any) -> None:
        method = HfApi.__init__ if name == "HfApi" else getattr(HfApi, name)
        inspect.signature(method).bind(None, *args, **options)  # None stands for self
        calls.append(HubCall(name, {**dict(zip(["repo_id"], args)), **options}))

    class RecordingHfApi:
        def __init__(self, **options: Any) -> None:
            record("HfApi", **options)

        def create_repo(self, *args: Any, **options: Any) -> None:
            record("create_repo", *args, **options)

        def create_branch(self, *args: Any, **options: Any) -> None:
            record("create_branch", *args, **options)

        def upload_folder(self, **options: Any) -> str:
            record("upload_folder", **options)
            copy = shutil.copytree(options["folder_path"], copies / f"upload-{len(calls)}")
            calls[-1] = calls[-1]._replace(copy=Path(copy))
            return f"https://huggingface.co/{options['repo_id']}/commit/0123abcd"

    monkeypatch.setattr("vitlab.weights.push.HfApi", RecordingHfApi)
    return calls
