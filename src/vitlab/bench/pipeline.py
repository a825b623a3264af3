"""End-to-end prediction benchmark: JPEG files on disk -> top-5, vitlab's predict pipeline against
timm's own, on the same files in the same run, with the same worker count.

    vitlab bench --pipeline predict --out build/bench

writes FILES JPEGs of 500 x 375 (ImageNet's typical size) into OUT/pipeline-jpegs, starts each
contender in a process of its own (bench.pipeline_runs: warm-up, then one pass per request), times
them in interleaved rounds, samples each one's RSS (workers included, bench.rss) for its whole life,
compilation included, and writes OUT/pipeline.json and OUT/pipeline.md. TARGET is the speed-up over
timm this pipeline aims at; the table says whether it was reached.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from .machine import cpu_text, describe, load_average
from .pipeline_runs import RUNS, PipelineSettings
from .rss import PeakRss

log = logging.getLogger("vitlab")

TARGET = 1.3  # vitlab images/s over timm's
PHOTO = (500, 375)  # width, height


@dataclasses.dataclass
class PipelineConfig:
    files: int = 512
    variant: str = "Ti/16"
    image_size: int = 224
    batch: int = 64
    workers: int = 1
    precision: str = "bf16"
    rounds: int = 3
    threads: int | None = None


def write_photos(folder: Path, count: int, size: tuple[int, int] = PHOTO, seed: int = 0) -> Path:
    """`count` distinct JPEGs, smooth like photographs (noise would be a JPEG's worst case): a random
    low-resolution field upscaled, plus a little grain. Kept between runs of the same count and size."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = folder / "made.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == [count, list(size), seed]:
        return folder
    rng = np.random.default_rng(seed)
    width, height = size
    for index in range(count):
        coarse = Image.fromarray(rng.integers(0, 256, (height // 25, width // 25, 3), dtype=np.uint8))
        pixels = np.asarray(coarse.resize(size, Image.Resampling.BICUBIC), dtype=np.int16)
        pixels = pixels + rng.integers(-8, 9, pixels.shape, dtype=np.int16)
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(folder / f"{index:05d}.jpg", quality=90)
    stamp.write_text(json.dumps([count, list(size), seed]))
    return folder


class Contender:
    """A pipeline_runs process: started warm, then asked for one timed pass at a time."""

    def __init__(self, name: str, settings: PipelineSettings, log_file: Path) -> None:
        self.name = name
        self.log = open(log_file, "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "vitlab.bench.pipeline_runs", name, json.dumps(dataclasses.asdict(settings))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.memory = PeakRss(self.process.pid).__enter__()
        self.log_file = log_file

    def answer(self) -> dict:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.close()
            raise RuntimeError(f"the {self.name} pipeline stopped; its log: {self.log_file.read_text()[-2000:]}")
        return json.loads(line)

    def ask(self, request: str) -> dict:
        assert self.process.stdin is not None
        self.process.stdin.write(request + "\n")
        self.process.stdin.flush()
        return self.answer()

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=120)
        self.memory.__exit__(None, None, None)
        self.log.close()


def run_pipeline(config: PipelineConfig, out_dir: Path) -> dict:
    out_dir.mkdir(parents=True, exist_ok=True)
    folder = write_photos(out_dir / "pipeline-jpegs", config.files)
    settings = PipelineSettings(
        str(folder),
        config.variant,
        config.image_size,
        config.batch,
        config.workers,
        config.precision,
        config.threads,
    )
    machine = describe(torch.device("cpu"))
    contenders = {name: Contender(name, settings, out_dir / f"pipeline-{name}.log") for name in RUNS}
    try:
        ready = {name: contender.answer() for name, contender in contenders.items()}  # warmed up in parallel
        names = list(contenders)
        seconds: dict[str, list[float]] = {name: [] for name in names}
        for round_index in range(config.rounds):  # interleaved, the order rotating
            shift = round_index % len(names)
            for name in names[shift:] + names[:shift]:
                result = contenders[name].ask("pass")
                if result["images"] != config.files:
                    raise RuntimeError(f"{name} predicted {result['images']} of {config.files} files")
                seconds[name].append(result["seconds"])
        stages = {name: contenders[name].ask("stages") for name in names}  # one at a time, the other idle
    finally:
        for contender in contenders.values():
            contender.close()
    rows = [
        {
            "implementation": name,
            "precision": ready[name]["precision"],
            "images_per_s": config.files / statistics.median(seconds[name]),
            "rounds_s": seconds[name],
            "warmup_s": ready[name]["ready"],
            "peak_rss_mib": contenders[name].memory.bytes / 2**20,
            "stages_ms": stages[name],
        }
        for name in names
    ]
    speed = {row["implementation"]: row["images_per_s"] for row in rows}
    ratio = speed["vitlab"] / speed["timm"]
    results = {
        "kind": "predict-pipeline",
        "machine": machine,
        "load_average_end": load_average(),
        "config": dataclasses.asdict(config),
        "photo_size": list(PHOTO),
        "rows": rows,
        "vitlab_over_timm": ratio,
        "target": TARGET,
        "target_reached": ratio >= TARGET,
    }
    results["markdown"] = markdown(results)
    (out_dir / "pipeline.json").write_text(json.dumps(results, indent=1) + "\n")
    (out_dir / "pipeline.md").write_text(results["markdown"])
    return results


def markdown(results: dict) -> str:
    config, machine = results["config"], results["machine"]
    width, height = results["photo_size"]
    verdict = "reached" if results["target_reached"] else "NOT reached"
    lines = [
        f"{config['files']} JPEGs of {width} x {height} on disk -> top-5, {config['variant']} at "
        f"{config['image_size']}, batch {config['batch']}, {config['workers']} DataLoader worker(s) each; "
        f"{cpu_text(machine)}, {machine['cpu_count']} cores, CPU capability {machine['cpu_capability']}, "
        f"torch {machine['torch']}; load average {machine['load_average']} at start, "
        f"{results['load_average_end']} at the end. Median of {config['rounds']} interleaved passes, each with "
        "its loader and workers started anew; peak RSS of the process and its workers over its whole run, "
        "compilation included.",
        "",
        "| pipeline | precision | images/s | peak RSS MiB | warm-up s |",
        "|---|---|---:|---:|---:|",
    ]
    for row in results["rows"]:
        lines.append(
            f"| {row['implementation']} | {row['precision']} | {row['images_per_s']:.1f} "
            f"| {row['peak_rss_mib']:.0f} | {row['warmup_s']:.1f} |"
        )
    lines += [
        "",
        f"vitlab / timm: {results['vitlab_over_timm']:.2f}x; target {results['target']:.1f}x {verdict}.",
        "",
        "Where the time goes (ms per image, one batch timed stage by stage in one process):",
        "",
        "| pipeline | " + " | ".join(results["rows"][0]["stages_ms"]) + " |",
        "|---|" + "---:|" * len(results["rows"][0]["stages_ms"]),
    ]
    for row in results["rows"]:
        lines.append(f"| {row['implementation']} | " + " | ".join(f"{v:.2f}" for v in row["stages_ms"].values()) + " |")
    return "\n".join(lines) + "\n"


PIPELINES = {"predict": run_pipeline}
