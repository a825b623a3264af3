"""One contender of the end-to-end prediction benchmark, run in a process of its own (so that its
peak RSS, workers included, is its own): JPEG files on disk -> top-5, over the whole folder.

    python -m vitlab.bench.pipeline_runs vitlab|timm SETTINGS_JSON

It warms up (compiles, for vitlab's fast path), prints {"ready": ..., "precision": ...}, then answers
each "pass" line on stdin with {"seconds": ..., "images": ...}: one full pass, a fresh DataLoader
(its workers started anew, as each run of a command starts them) over every file; "stages" with the
milliseconds per image of each stage, timed on one batch in this process.

- vitlab: its predict pipeline (vitlab.data.stream + vitlab.evaluate.stream): PIL decode and resize in
  the workers, uint8 batches, normalised on the batch; bf16 runs the fast path (bf16 weights,
  compiled), fp32 eager.
- timm: timm's inference script's way: ImageDataset, resolve_data_config + create_loader (its
  create_transform in the workers, uint8 batches, normalised by its PrefetchLoader), its
  VisionTransformer under torch.no_grad, bf16 as `--amp --amp-dtype bfloat16` (autocast), fp32 plain.
Both read every pixel (no reduced-scale JPEG decoding) and resize with the same interpolation,
crop_pct, mean and std: vitlab's preprocessing of the variant.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from PIL import Image

from vitlab.data.images import IMAGE_EXTENSIONS
from vitlab.model import ViTConfig, config_for, create_untrained

from .implementations import build_timm


@dataclass
class PipelineSettings:
    folder: str
    variant: str = "Ti/16"
    image_size: int = 224
    batch: int = 64
    workers: int = 1
    precision: str = "bf16"  # fp32 | bf16
    threads: int | None = None

    def files(self) -> list[Path]:
        return sorted(p for p in Path(self.folder).rglob("*") if p.suffix.lower() in IMAGE_EXTENSIONS)


def _clock(step) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


class VitlabRun:
    def __init__(self, settings: PipelineSettings) -> None:
        from vitlab.data.stream import PathTable
        from vitlab.data.transforms import eval_transform
        from vitlab.evaluate.stream import StreamPredictor

        self.settings = settings
        self.model = create_untrained(settings.variant, image_size=settings.image_size).eval()
        config = self.model.config
        self.paths = PathTable(str(p) for p in settings.files())
        self.transform = eval_transform(config.image_size, config.preprocessing, normalize=False)
        self.fast = settings.precision != "fp32"
        bf16 = settings.precision == "bf16"
        autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
        self.predictor = StreamPredictor(
            self.model,
            topk=5,
            device=torch.device("cpu"),
            dtype=torch.bfloat16 if bf16 else torch.float32,
            autocast=autocast,
            fast=self.fast,
            batch_size=settings.batch,
        )
        self.precision = "bf16 weights and compute, compiled (fast path)" if self.fast else "fp32, eager"

    def one_pass(self) -> int:
        from vitlab.data.stream import ImageFiles, file_loader

        loader = file_loader(ImageFiles(self.paths, self.transform), self.settings.batch, self.settings.workers)
        return sum(len(results) for results in self.predictor.stream(loader))

    def stages(self) -> dict[str, float]:
        from vitlab.data import read_image
        from vitlab.data.stream import FileBatch

        # one batch of files, timed stage by stage in this process: the "where the time goes" table
        paths = [self.paths[i] for i in range(min(self.settings.batch, len(self.paths)))]
        images = []
        decode = sum(_clock(lambda p=p: images.append(read_image(p))) for p in paths)
        tensors: list[torch.Tensor] = []
        resize = sum(_clock(lambda i=i: tensors.append(torch.as_tensor(self.transform(i)))) for i in images)
        batch = torch.stack(tensors)
        normalise = _clock(lambda: self.predictor.normalize(batch))
        model = _clock(lambda: self.predictor.run(FileBatch(list(range(len(paths))), batch, [])))
        return _per_image(len(paths), decode=decode, resize=resize, normalise=normalise, model_and_topk=model)


class TimmRun:
    def __init__(self, settings: PipelineSettings) -> None:
        from timm.data import ImageDataset, resolve_data_config

        self.settings = settings
        config = config_for(settings.variant, image_size=settings.image_size)
        assert isinstance(config, ViTConfig), config  # the benchmark's variants are ViTs
        self.model = build_timm(config).eval()
        prep = config.preprocessing
        self.data_config = resolve_data_config(
            {
                "input_size": (3, *config.image_size),
                "mean": prep.mean,
                "std": prep.std,
                "crop_pct": prep.crop_pct,
                "interpolation": prep.interpolation,
            },
            model=self.model,
        )
        self.dataset = ImageDataset(settings.folder)
        bf16 = settings.precision == "bf16"
        self.autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
        self.precision = "fp32 weights, bf16 autocast (--amp --amp-dtype bfloat16), eager" if bf16 else "fp32, eager"

    def loader(self):
        from timm.data import create_loader

        c = self.data_config
        return create_loader(
            self.dataset,
            input_size=c["input_size"],
            batch_size=self.settings.batch,
            use_prefetcher=True,
            interpolation=c["interpolation"],
            mean=c["mean"],
            std=c["std"],
            num_workers=self.settings.workers,
            crop_pct=c["crop_pct"],
            crop_mode=c["crop_mode"],
            device=torch.device("cpu"),
            persistent_workers=False,  # started anew each pass, as vitlab's are
        )

    @torch.no_grad()
    def predict(self, images: torch.Tensor) -> list:
        with self.autocast():
            output = self.model(images)
        values, indices = output.float().softmax(-1).topk(5)
        return list(zip(indices.tolist(), values.tolist()))

    def one_pass(self) -> int:
        return sum(len(self.predict(images)) for images, _ in self.loader())

    def stages(self) -> dict[str, float]:
        loader = self.loader()
        transform = self.dataset.transform  # what create_loader set: timm's create_transform
        count = min(self.settings.batch, len(self.dataset))
        paths = [self.dataset.filename(i, absolute=True) for i in range(count)]
        images = []
        decode = sum(_clock(lambda p=p: images.append(Image.open(p).convert("RGB"))) for p in paths)
        arrays = []
        resize = sum(_clock(lambda i=i: arrays.append(torch.as_tensor(transform(i)))) for i in images)
        batch = torch.stack(arrays)
        mean, std = loader.mean, loader.std
        normalised = []
        normalise = _clock(lambda: normalised.append(batch.float().sub_(mean).div_(std)))
        model = _clock(lambda: self.predict(normalised[0]))
        return _per_image(count, decode=decode, resize=resize, normalise=normalise, model_and_topk=model)


def _per_image(count: int, **seconds: float) -> dict[str, float]:
    return {stage: 1000 * value / count for stage, value in seconds.items()}


RUNS: dict[str, type[VitlabRun] | type[TimmRun]] = {"vitlab": VitlabRun, "timm": TimmRun}


def serve(name: str, settings: PipelineSettings) -> None:
    if settings.threads:
        torch.set_num_threads(settings.threads)
    run: VitlabRun | TimmRun = RUNS[name](settings)
    warm = _clock(run.one_pass)  # compiles vitlab's fast path; both start their workers once
    print(json.dumps({"ready": warm, "precision": run.precision}), flush=True)
    for line in sys.stdin:
        if line.strip() == "stages":
            print(json.dumps(run.stages()), flush=True)
        elif line.strip() == "pass":
            start = time.perf_counter()
            images = run.one_pass()
            print(json.dumps({"seconds": time.perf_counter() - start, "images": images}), flush=True)
        else:
            break


if __name__ == "__main__":
    serve(sys.argv[1], PipelineSettings(**json.loads(sys.argv[2])))
