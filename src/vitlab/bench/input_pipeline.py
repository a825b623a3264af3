"""vitlab's training input pipeline against timm's, per CPU core: JPEG files -> normalised batches.

    PYTHONPATH=src python -m vitlab.bench.input_pipeline --out build/bench-input
    vitlab bench --pipeline train-input --out build/bench-input

The bench writes photo-like 500 x 375 JPEG files (ImageNet's typical size) into OUT/images, then
each side reads them in the same interleaved rounds (timing.py): vitlab through its own dataset
(EncodedImages, read_image), transform (train_transform of a recipe's augmentation) and loader
(train_loader, seeded per sample), then its batch mixing; timm through ImageDataset,
create_transform(is_training=True, ...) with the same settings (`settings` pairs them), a
torch DataLoader and timm's Mixup. With `workers=0` (the default) everything runs in this process on
one thread, so images/s is images/s per core. The loaders' batches are the headline figure: in
training both vitlab's trainer and timm's train.py mix batches on the training device, not in the
loader; the mixing's CPU time is timed in the same rounds and reported beside it. A per-stage
profile says where the time goes.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import torch
from PIL import Image

from vitlab.data.datasets import EncodedImages
from vitlab.data.images import read_image
from vitlab.data.randaugment import FILL
from vitlab.data.transforms import batch_mixing, train_transform
from vitlab.model.config import Preprocessing
from vitlab.training.config import AugmentSpec
from vitlab.training.loader import epoch_sampler, train_loader
from vitlab.training.recipes import get_recipe

from .feeding import gpu_feed_line
from .machine import describe, load_average
from .randaugment_ops import op_times
from .timing import interleaved

log = logging.getLogger("vitlab")

Pipeline = Literal["train-input"]
PIPELINES: tuple[str, ...] = get_args(Pipeline)
KIND = "train-input-pipeline"
PROFILE_PASSES = 3
PHOTO_SIZE = (500, 375)  # width x height of the files: ImageNet's most common size


@dataclass(frozen=True)
class PipelineConfig:
    recipe: str = "small-data"  # whose augmentation (AugmentSpec) both sides apply, at image_size
    image_size: int = 224
    images: int = 256  # JPEG files written
    classes: int = 4
    batch: int = 32
    batches_per_round: int = 2
    rounds: int = 7
    workers: int = 0  # 0: all in this process, one thread: images/s per core
    profile_images: int = 32
    benchmarks: str = "docs/benchmarks"  # where a GPU bench JSON with a B/16 training step would be

    def __post_init__(self) -> None:
        numbers = dict(images=self.images, batch=self.batch, rounds=self.rounds, classes=self.classes)
        bad = next((name for name, value in numbers.items() if value < 1), None)
        if bad or self.workers < 0 or self.batches_per_round < 1 or self.profile_images < 1:
            raise ValueError(f"{bad or 'workers, batches_per_round or profile_images'} is out of range in {self}")
        if self.images < self.batch:
            raise ValueError(f"images ({self.images}) must be at least one batch ({self.batch})")


def write_photos(folder: Path, count: int, classes: int, seed: int = 0) -> list[tuple[str, int]]:
    """`count` JPEG files (quality 90) in folder/<class>/, photo-like: smooth colour fields with grain,
    about 80 KB each, as a camera's 500 x 375 picture is; (path, label) of each."""
    rng = np.random.default_rng(seed)
    width, height = PHOTO_SIZE
    files = []
    for index in range(count):
        label = index % classes
        coarse = Image.fromarray(rng.integers(0, 256, (height // 25 + 1, width // 25 + 1, 3), dtype=np.uint8))
        smooth = np.asarray(coarse.resize(PHOTO_SIZE, Image.Resampling.BICUBIC), dtype=np.int16)
        grain = rng.integers(-20, 21, smooth.shape, dtype=np.int16)
        path = folder / f"class{label}" / f"{index:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(smooth + grain, 0, 255).astype(np.uint8)).save(path, "JPEG", quality=90)
        files.append((str(path), label))
    return files


def recipe_augment(config: PipelineConfig) -> AugmentSpec:
    return get_recipe(config.recipe).augment


def timm_settings(augment: AugmentSpec, preprocessing: Preprocessing) -> dict:
    """create_transform's arguments for vitlab's augmentation."""
    options: dict = dict(
        is_training=True,
        scale=augment.crop_scale,
        ratio=augment.crop_ratio,
        hflip=0.5 if augment.hflip else 0.0,
        vflip=0.0,
        interpolation=preprocessing.interpolation,
        mean=preprocessing.mean,
        std=preprocessing.std,
        re_prob=augment.reprob,
        re_mode="pixel",  # vitlab's random erasing (transforms.random_erasing)
        color_jitter=None,
    )
    if augment.randaugment is not None:
        num_ops, magnitude = augment.randaugment
        options["auto_augment"] = f"rand-m{magnitude}-n{num_ops}"
    if augment.rotation or augment.zoom:
        raise ValueError("timm has no Keras rotation or zoom: choose a recipe without augment.rotation/zoom")
    return options  # settings() lists them beside vitlab's


def settings(augment: AugmentSpec, preprocessing: Preprocessing, timm_options: dict) -> list[tuple[str, str]]:
    """(vitlab's setting, timm's) row by row, with this run's values."""
    mix = f"mixup={augment.mixup}, cutmix={augment.cutmix}"
    timm_fill = tuple(min(255, round(255 * m)) for m in preprocessing.mean)  # timm's create_transform
    return [
        (
            f"crop_scale={augment.crop_scale}, crop_ratio=({augment.crop_ratio[0]:.3g}, {augment.crop_ratio[1]:.3g})",
            f"scale={timm_options['scale']}, ratio=({timm_options['ratio'][0]:.3g}, {timm_options['ratio'][1]:.3g})",
        ),
        (f"hflip={augment.hflip}", f"hflip={timm_options['hflip']}"),
        (
            f"interpolation={preprocessing.interpolation} (crop, RandAugment)",
            f"interpolation={timm_options['interpolation']}",
        ),
        (
            f"randaugment={augment.randaugment}: timm's 15 operations, p 0.5, fill {FILL}",
            f"auto_augment={timm_options.get('auto_augment')!r} (fill: round(255 x mean) = {timm_fill})",
        ),
        (f"mean={preprocessing.mean}, std={preprocessing.std} (ToNormalized)", "the same (ToTensor, Normalize)"),
        (f"reprob={augment.reprob} (pixel mode)", f"re_prob={timm_options['re_prob']}, re_mode='pixel'"),
        (f"{mix}: v2.RandomChoice of MixUp and CutMix", f"Mixup({mix.replace('=', '_alpha=')}, switch_prob=0.5)"),
        (
            f"label_smoothing={augment.label_smoothing}, in the loss",
            f"Mixup(label_smoothing={augment.label_smoothing}), in the targets",
        ),
    ]


class Contender:
    """One side: a loader that never runs out (a new epoch when one ends) and its batch mixing."""

    def __init__(self, name: str, loader: torch.utils.data.DataLoader, mixing: Callable, next_epoch: Callable):
        self.name, self.loader, self.mixing, self.next_epoch = name, loader, mixing, next_epoch
        self.epoch = 0
        self.batches: Iterator = iter(loader)

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        try:
            return next(self.batches)
        except StopIteration:
            self.epoch += 1
            self.next_epoch(self.epoch)
            self.batches = iter(self.loader)
            return next(self.batches)


def _batches(contender: Contender, count: int) -> None:
    for _ in range(count):
        contender.batch()


def _mix(contender: Contender, count: int, images: torch.Tensor, labels: torch.Tensor) -> None:
    for _ in range(count):
        contender.mixing(images, labels)


def vitlab_contender(files, config: PipelineConfig, augment: AugmentSpec, preprocessing) -> Contender:
    transform = train_transform(config.image_size, preprocessing, augment)
    dataset = EncodedImages([path for path, _ in files], [label for _, label in files], transform)
    loader = train_loader(dataset, config.batch, seed=0, workers=config.workers, pin_memory=False)
    mixing = batch_mixing(augment.mixup, augment.cutmix, config.classes) or (lambda images, labels: (images, labels))
    return Contender("vitlab", loader, mixing, lambda epoch: epoch_sampler(loader).set_epoch(epoch))


def timm_contender(folder: Path, config: PipelineConfig, augment: AugmentSpec, preprocessing) -> Contender:
    import timm.data

    transform = timm.data.create_transform(config.image_size, **timm_settings(augment, preprocessing))
    dataset = timm.data.ImageDataset(str(folder), transform=transform)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=config.batch,
        shuffle=True,
        drop_last=True,
        num_workers=config.workers,
        persistent_workers=config.workers > 0,
        generator=torch.Generator().manual_seed(0),
    )
    mixing: Callable = lambda images, labels: (images, labels)  # noqa: E731
    if augment.mixup or augment.cutmix:
        mixer = timm.data.Mixup(
            mixup_alpha=augment.mixup,
            cutmix_alpha=augment.cutmix,
            label_smoothing=augment.label_smoothing,
            num_classes=config.classes,
        )
        mixing = mixer
    return Contender("timm", loader, mixing, lambda epoch: None)


def profile(decode: Callable, transform, paths: list[str]) -> dict[str, float]:
    """Milliseconds per image of decoding and of each step of `transform` (a Compose), on `paths`."""
    seconds: dict[str, float] = {"decode": 0.0}
    for index, path in enumerate(paths):
        random.seed(index), torch.manual_seed(index)
        start = time.perf_counter()
        sample = decode(path)
        seconds["decode"] += time.perf_counter() - start
        for step in transform.transforms:
            name = type(step).__name__
            start = time.perf_counter()
            sample = step(sample)
            seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start
    return {name: 1e3 * value / len(paths) for name, value in seconds.items()}


def run_pipeline_bench(config: PipelineConfig, out: Path) -> dict:
    torch.set_num_threads(1)  # per core: one thread in this process (and in each worker)
    machine = describe(torch.device("cpu"))
    folder = out / "images"
    files = write_photos(folder, config.images, config.classes)
    augment, preprocessing = recipe_augment(config), Preprocessing()
    contenders = [
        vitlab_contender(files, config, augment, preprocessing),
        timm_contender(folder, config, augment, preprocessing),
    ]
    rounds = config.batches_per_round
    steps: dict[str, Callable[[], object]] = {}
    for contender in contenders:
        steps[contender.name] = functools.partial(_batches, contender, rounds)
        steps[f"{contender.name} mixing"] = functools.partial(_mix, contender, rounds, *contender.batch())
    for step in steps.values():
        step()  # warm-up: workers start, first files cached
    seconds = interleaved(steps, config.rounds, torch.device("cpu"))
    per_round = config.batch * rounds
    speed = {name: per_round / statistics.median(values) for name, values in seconds.items()}
    for name in ("vitlab", "timm"):  # the loader and then the mixing, one after the other on one core
        speed[f"{name} with mixing"] = 1 / (1 / speed[name] + 1 / speed[f"{name} mixing"])
    paths = [path for path, _ in files[: config.profile_images]]
    stages = stage_times(paths, config, augment, preprocessing)
    randaugment_ops = None
    if augment.randaugment is not None:
        crop = read_image(paths[0]).resize((config.image_size, config.image_size), Image.Resampling.BICUBIC)
        randaugment_ops = op_times(crop, augment.randaugment[1], preprocessing.interpolation)
    cores = max(1, config.workers)
    per_core = {name: value / cores for name, value in speed.items()}
    results: dict[str, Any] = {
        "kind": KIND,
        "machine": machine,
        "load_average_end": load_average(),
        "config": asdict(config),
        "augment": asdict(augment),
        "timm_settings": timm_settings(augment, preprocessing),
        "file_kb": sum(Path(p).stat().st_size for p, _ in files) / len(files) / 1024,
        "seconds": seconds,
        "images_per_s": speed,
        "images_per_s_per_core": per_core,
        "vitlab_over_timm": speed["vitlab"] / speed["timm"],
        "vitlab_over_timm_with_mixing": speed["vitlab with mixing"] / speed["timm with mixing"],
        "profile_ms_per_image": stages,
        "randaugment_ms_per_op": randaugment_ops,
    }
    results["gpu_feed"] = gpu_feed_line(Path(config.benchmarks), per_core["vitlab"])
    from .input_report import markdown

    results["settings"] = settings(augment, preprocessing, results["timm_settings"])
    results["markdown"] = markdown(results)
    return results


def stage_times(
    paths: list, config: PipelineConfig, augment, preprocessing: Preprocessing
) -> dict[str, dict[str, float]]:
    """Milliseconds per image of each stage of vitlab's and timm's pipelines, one image at a time over
    `paths`; per stage the fastest of PROFILE_PASSES passes, the sides alternating."""
    import timm.data

    timm_transform = timm.data.create_transform(config.image_size, **timm_settings(augment, preprocessing))
    sides = {
        "vitlab": (read_image, train_transform(config.image_size, preprocessing, augment)),
        "timm": (lambda path: Image.open(path).convert("RGB"), timm_transform),
    }
    stages: dict[str, dict[str, float]] = {}
    for _ in range(PROFILE_PASSES):  # alternating sides; per stage the least disturbed pass
        for name, (decode, transform) in sides.items():
            times = profile(decode, transform, paths)
            stages[name] = {stage: min(ms, stages.get(name, times)[stage]) for stage, ms in times.items()}
    return stages


def write(results: dict, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "train-input.json", out / "train-input.md"
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    md_path.write_text(results["markdown"])
    return json_path, md_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vitlab.bench.input_pipeline", description=__doc__.split("\n")[0])
    defaults = PipelineConfig()
    for name in ("images", "batch", "rounds", "workers", "image_size", "batches_per_round", "profile_images"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name))
    parser.add_argument("--recipe", default=defaults.recipe, help="the recipe whose augmentation is applied")
    parser.add_argument("--benchmarks", default=defaults.benchmarks, help="folder searched for a GPU bench JSON")
    parser.add_argument("--out", default="build/bench-input")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    options = {name: value for name, value in vars(args).items() if name != "out"}
    results = run_pipeline_bench(PipelineConfig(**options), Path(args.out))
    json_path, md_path = write(results, Path(args.out))
    per_core = results["images_per_s_per_core"]
    print(
        f"train input per core: vitlab {per_core['vitlab']:.1f} images/s, timm {per_core['timm']:.1f} images/s, "
        f"vitlab / timm = {results['vitlab_over_timm']:.2f}x (load average {results['machine']['load_average']})"
    )
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
