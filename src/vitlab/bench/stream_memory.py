"""Does `vitlab predict` keep its memory bounded? Peak RSS over N and 10 N small JPEGs, compared.

    python -m vitlab.bench.stream_memory --sizes 2000 20000 --out build/bench/stream-memory

writes a folder of N small JPEGs (a few distinct pictures, repeated), a random tiny model, runs
`vitlab predict DIR --out top.csv` on each folder in a subprocess and samples the RSS of that
process and its DataLoader workers (bench.rss) while it runs. A predictor that keeps every decoded
image grows with N; a streaming one does not: the peaks stay within a few percent.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .machine import load_average
from .rss import PeakRss

DISTINCT = 16  # pictures encoded once and written under many names: generating 20k files takes a second


def write_jpegs(folder: Path, count: int, size: int = 32, seed: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    encoded = []
    for _ in range(DISTINCT):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(buffer, "JPEG", quality=90)
        encoded.append(buffer.getvalue())
    for index in range(count):
        (folder / f"{index:07d}.jpg").write_bytes(encoded[index % DISTINCT])
    return folder


def write_model(folder: Path, image_size: int = 32) -> Path:
    from vitlab.model import create_untrained

    options = dict(image_size=image_size, depth=2, dim=32, num_heads=2, mlp_dim=64, num_classes=10)
    model: Any = create_untrained("Ti/8", **options)  # a VisionTransformer, which saves itself
    model.save_pretrained(folder)
    return folder


def predict_peak(model: Path, images: Path, flags: list[str], env: dict[str, str] | None = None) -> dict:
    """Run `vitlab predict --ckpt MODEL IMAGES FLAGS` in a subprocess; its peak RSS (workers included)
    and time. `env` runs another checkout (PYTHONPATH), e.g. a version that keeps decoded images."""
    command = [sys.executable, "-m", "vitlab", "--no-progress", "predict", "--ckpt", str(model), str(images), *flags]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    with PeakRss(process.pid) as peak:
        _, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"vitlab predict failed ({process.returncode}): {err.decode()[-2000:]}")
    return {"peak_rss_mib": peak.bytes / 2**20, "seconds": time.perf_counter() - start}


def measure(
    sizes: tuple[int, ...],
    out_dir: Path,
    *,
    image: int = 32,
    workers: int = 1,
    batch_size: int = 64,
    env: dict[str, str] | None = None,
    streaming: bool = True,
) -> dict:
    """Peak RSS of `vitlab predict` over each number of files; `growth` is the last peak over the first.
    `streaming=False` leaves out the flags a predict that prints everything at the end lacks."""
    model = write_model(out_dir / "model")
    runs = {}
    for count in sizes:
        images = write_jpegs(out_dir / f"jpegs-{count}", count, image)
        out = out_dir / f"top-{count}.csv"
        flags = ["--batch-size", str(batch_size), "--device", "cpu"]
        # --fast off: the same path at every size (auto compiles for large folders only; the compiler's
        # memory does not grow with the folder either, but it would differ between the sizes compared)
        flags += ["--out", str(out), "--workers", str(workers), "--fast", "off"] if streaming else []
        runs[count] = predict_peak(model, images, flags, env)
        if streaming:
            runs[count]["rows"] = len(out.read_text().splitlines()) - 1
    first, last = runs[sizes[0]]["peak_rss_mib"], runs[sizes[-1]]["peak_rss_mib"]
    return {
        "kind": "predict-memory",
        "image_size": image,
        "workers": workers,
        "batch_size": batch_size,
        "runs": runs,
        "growth": last / first,
        "load_average": load_average(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--image", type=int, default=32, help="side of the square JPEGs (default 32)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", default="build/bench/stream-memory")
    args = parser.parse_args(argv)
    result = measure(tuple(args.sizes), Path(args.out), image=args.image, workers=args.workers)
    (Path(args.out) / "memory.json").write_text(json.dumps(result, indent=1) + "\n")
    for count, run in result["runs"].items():
        print(f"{count} files: peak RSS {run['peak_rss_mib']:.0f} MiB, {run['seconds']:.1f} s")
    print(f"growth {result['growth']:.3f}x, load average {result['load_average']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
