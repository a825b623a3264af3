"""predict_files: image files, or folders of them, streamed through a model in batches, so that
memory is the same for ten files or a million; each batch's results written as they come to a
prediction file (prediction_files.py), which a rerun with the same options resumes. `vitlab predict`
is this, with its flags."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitlab.data.images import image_files
from vitlab.data.stream import ImageFiles, PathTable, default_workers, file_loader
from vitlab.data.transforms import eval_resize, eval_transform
from vitlab.errors import InputError
from vitlab.progress import progress
from vitlab.runtime import Precision, resolve_precision

from .predict import model_config
from .prediction_files import CSV_CELLS, FeatureFile, PredictionWriter, model_fingerprint
from .stream import FastChoice, FileResult, StreamPredictor, choose_path

log = logging.getLogger("vitlab")


@dataclass
class PredictedFiles:
    """What predict_files did: the files listed, and of them how many are predicted and skipped (a
    resumed run's earlier ones included)."""

    files: int
    predicted: int
    skipped: int


Rows = Sequence[tuple[str, FileResult]]


def predict_files(
    model: torch.nn.Module,
    images: Sequence[str | os.PathLike],
    *,
    topk: int = 5,
    out: str | os.PathLike | None = None,
    features: str | os.PathLike | None = None,
    batch_size: int = 64,
    workers: int | None = None,
    device: torch.device | None = None,
    precision: Precision | None = None,
    fast: FastChoice = "auto",
    draft: bool = False,
    runtime: str = "torch",
    raw_csv: bool = False,
    fingerprint: str | None = None,
    on_rows: Callable[[Rows], None] | None = None,
) -> PredictedFiles:
    """The top `topk` classes of every image file in `images` (files, or folders of them), streamed
    in batches through `model` (a vitlab model, or an exported one: `runtime` names which), so that
    memory is the same for ten files or a million.

    Results go, as each batch finishes, to `out` (FILE.csv or FILE.jsonl; a rerun with the same `out`
    and options resumes it) and to `on_rows` ((path, FileResult) pairs, in file order); with
    `features`, the pre-logits features to that .npy, a row per file (topk 0: those alone, as a
    feature extractor gives). A CSV's cells that a spreadsheet would run as formulas get a leading
    quote unless `raw_csv`. `fingerprint` identifies the model for resuming (default: its weights).
    """
    if batch_size < 1 or topk < 0:
        raise InputError(f"predict_files: batch_size must be >= 1 and topk >= 0, got {batch_size} and {topk}")
    if features is not None and out is None:
        raise InputError("predict_files: features needs out, whose rows its rows follow")
    device = device or next((p.device for p in model.parameters()), torch.device("cpu"))
    precision = precision or resolve_precision("fp32", device)
    paths = PathTable(str(path) for path in image_files([str(name) for name in images]))
    options = prediction_options(model, images, paths, topk, precision, runtime, draft, features, fingerprint)
    options[CSV_CELLS] = ("raw" if raw_csv else "escaped") if Path(out or "").suffix == ".csv" else None
    writer, feature_file, todo = open_outputs(out, features, options, paths, topk, model_config(model).feature_dim)
    done = writer.done if writer else set()
    predictor = file_predictor(model, topk, device, precision, fast, runtime, len(todo), feature_file, batch_size)
    loader = files_in_batches(model_config(model), paths, todo, batch_size, workers, draft, device)
    sinks = [sink for sink in (writer.write if writer else None, on_rows) if sink is not None]
    predicted = skipped = 0
    try:
        for results in predictor.stream(progress(loader, "predict", total=len(loader))):
            skipped += sum(result.skipped is not None for result in results)
            predicted += sum(result.skipped is None for result in results)
            if feature_file is not None:
                feature_file.write(results)  # before the rows: a row written has its features
            for sink in sinks:
                sink([(paths[result.position], result) for result in results])
    finally:  # what was written stays readable, for the next run to resume
        for opened in (writer, feature_file):
            if opened is not None:
                opened.close()
    before = writer.skipped_before if writer else 0
    if not predicted and len(done) == before:
        raise InputError("none of the images can be read")
    return PredictedFiles(len(paths), len(done) - before + predicted, before + skipped)


def open_outputs(
    out: str | os.PathLike | None,
    features: str | os.PathLike | None,
    options: dict[str, Any],
    paths: PathTable,
    topk: int,
    feature_dim: int,
) -> tuple[PredictionWriter | None, FeatureFile | None, np.ndarray]:
    """The prediction and feature files opened (resumed where they hold rows of these options), and
    the positions of the files left to predict."""
    writer = PredictionWriter(Path(out), options, topk) if out is not None else None
    done = writer.done if writer else set()
    todo = np.fromiter((i for i, path in enumerate(paths) if path not in done), dtype=np.int64)
    if writer and done:
        log.info("%s: %d of %d files already predicted, %d to go", out, len(paths) - len(todo), len(paths), len(todo))
    try:
        feature_file = FeatureFile(Path(features), len(paths), feature_dim, len(done)) if features else None
    except BaseException:
        if writer is not None:
            writer.close()  # frees `out` for the rerun this error asks for
        raise
    return writer, feature_file, todo


def file_predictor(
    model: torch.nn.Module,
    topk: int,
    device: torch.device,
    precision: Precision,
    fast: FastChoice,
    runtime: str,
    count: int,
    features: FeatureFile | None,
    batch_size: int,
) -> StreamPredictor:
    """The StreamPredictor of `count` files, on the eager or the fast path (choose_path; an exported
    model runs as it was exported), the choice logged."""
    if runtime != "torch":
        use_fast, why = False, {"onnx": "onnxruntime"}.get(runtime, runtime)
    else:
        use_fast, why = choose_path(fast, precision.name, device, count)
    path = "fast" if use_fast else "eager"
    log.info("predicting %d images on %s in %s, %s path (%s)", count, device.type, precision.name, path, why)
    return StreamPredictor(
        model,
        topk=topk,
        device=device,
        dtype=precision.compute_dtype,
        autocast=precision.autocast,
        fast=use_fast,
        features=features is not None,
        batch_size=batch_size,
    )


def files_in_batches(
    config: Any,
    paths: PathTable,
    todo: np.ndarray,
    batch_size: int,
    workers: int | None,
    draft: bool,
    device: torch.device,
) -> torch.utils.data.DataLoader:
    """The files at `todo`, decoded and resized as the model's config says, in order; without
    workers where one batch holds them all."""
    workers = default_workers() if workers is None else workers
    resize = max(eval_resize(config.image_size, config.preprocessing.crop_pct)) if draft else None
    transform = eval_transform(config.image_size, config.preprocessing, normalize=False)
    dataset = ImageFiles(paths, transform, positions=todo, draft=resize)
    return file_loader(dataset, batch_size, workers if len(todo) > batch_size else 0, device.type == "cuda")


def prediction_options(
    model: torch.nn.Module,
    images: Sequence[str | os.PathLike],
    paths: PathTable,
    topk: int,
    precision: Precision,
    runtime: str,
    draft: bool,
    features: str | os.PathLike | None,
    fingerprint: str | None,
) -> dict[str, Any]:
    """What produced a prediction file's rows (its FILE.options.json): a resume must match it."""
    config = model_config(model)
    pre = config.preprocessing
    return {
        "images": [str(name) for name in images],
        "model": fingerprint or model_fingerprint(model),
        "runtime": runtime,
        "precision": precision.name,
        "topk": topk,
        "image_size": list(config.image_size),
        "preprocessing": [list(pre.mean), list(pre.std), pre.crop_pct, pre.interpolation],
        "draft": draft,
        "features": None if features is None else str(features),
        # features' rows follow the file list's order: a resume must list the same files, in order
        "file_list": paths.fingerprint() if features else None,
    }
