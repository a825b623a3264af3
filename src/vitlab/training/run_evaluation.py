"""evaluate_run: a model scored on a split of a data source, split as the run that trained it split
it, so that scoring a run folder on the run's data gives exactly the accuracy in its summary.json.
`vitlab eval` is this, with its flags.

A run folder's run.yaml decides the split (run.seed, data.val_fraction, data.dev_fraction and
dev_split, data.train_fraction), the bad-image limit, the device, precision and batch size; a setting
given that differs from the run's says so in the log. A scored image the run trained on is a warning:
found by its bytes where the run recorded its training images' digests (RUN/train_digests.npy), else
by path. It lives with training, not in vitlab.evaluate, because it reads the run's config and
training split, which the evaluate layer may not import.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vitlab.data import load_datasets
from vitlab.errors import InputError

from .config import TrainConfig, lookup, read_run_config

log = logging.getLogger("vitlab")

SPLITS = ("val", "dev", "train", "all")
DEFAULT_BATCH_SIZE = 64  # without a run.yaml to take the run's evaluation batch from


@dataclasses.dataclass
class EvalSettings:
    """What decides which images are scored and how; each field the run's unless given otherwise."""

    data: str | None
    seed: int
    val_fraction: float
    train_fraction: float
    dev_fraction: float | None
    dev_split: str
    max_bad_fraction: float
    device: str
    precision: str
    batch_size: int


# EvalSettings field -> (the `vitlab eval` flag that gives it, or None; the run's TrainConfig key it defaults to)
SETTING_FLAGS = {
    "data": ("--data", "data.source"),
    "seed": ("--seed", "run.seed"),
    "val_fraction": ("--val-fraction", "data.val_fraction"),
    "train_fraction": ("--train-fraction", "data.train_fraction"),
    "dev_fraction": (None, "data.dev_fraction"),
    "dev_split": (None, "data.dev_split"),
    "max_bad_fraction": ("--max-bad-fraction", "data.max_bad_fraction"),
    "device": ("--device", "run.device"),
    "precision": ("--precision", "run.precision"),
    "batch_size": ("--batch-size", "data.eval_batch_size"),
}


@dataclasses.dataclass
class RunEvaluation:
    """What evaluate_run measured: the evaluation itself and the report written (as JSON) to `out`."""

    evaluation: Any  # vitlab.evaluate.Evaluation
    report: dict[str, Any]

    def describe(self) -> str:
        """One line: top-1 / top-5, ReaL top-1 where scored, ECE, the count and what was scored."""
        real = f"  ReaL top-1 {self.report['real']['top1']:.4f}" if "real" in self.report else ""
        return (
            f"{self.evaluation.describe()}{real}  ECE {self.report['metrics']['ece']:.4f}  "
            f"({self.evaluation.count} images, {self.report['data']} {self.report['split']})"
        )


def read_run(ckpt: str | os.PathLike):
    """The TrainConfig of the run that wrote the model folder `ckpt`, and its run.yaml; (None, None) else."""
    from .trainer import RUN_FILE

    path = Path(ckpt) / RUN_FILE
    if not path.is_file():
        return None, None
    return read_run_config(path), path


def run_split(run: TrainConfig) -> dict[str, Any]:
    """The load_datasets arguments that fix how `run` split its data: the fractions, the dev split and the seed."""
    return {
        "val_fraction": run.data.val_fraction,
        "seed": run.run.seed,
        "train_fraction": run.data.train_fraction,
        "dev_fraction": run.data.dev_fraction,
        "dev_split": run.data.dev_split,
    }


def resolve_settings(given: dict[str, Any], run: TrainConfig | None, run_file: Path | None, ckpt: str) -> EvalSettings:
    """Each setting as given (None: not given), else the run's, else the default of a new run;
    overrides of the run's logged by their flag."""
    base = run or TrainConfig()
    values = {}
    for name, (flag, key) in SETTING_FLAGS.items():
        default = lookup(base, key)
        if name == "data" and run is None:
            default = None  # no guess: the data must be named
        if name == "batch_size":
            default = base.evaluation_batch_size if run is not None else DEFAULT_BATCH_SIZE
        value = given.get(name) if flag else None
        values[name] = default if value is None else value
        if value is not None and run is not None and value != default:
            log.info("%s %s overrides the run's %s=%s (%s)", flag, value, key, default, run_file)
    settings = EvalSettings(**values)
    if settings.data is None:
        raise InputError(f"--data is needed: {ckpt} has no run.yaml naming the data it was trained on")
    if settings.batch_size < 1:
        raise InputError(f"--batch-size must be >= 1, got {settings.batch_size}")
    if not 0.0 <= settings.max_bad_fraction < 1.0:
        raise InputError(f"--max-bad-fraction must be in [0, 1), got {settings.max_bad_fraction}")
    return settings


def evaluate_run(
    model: Any,
    ckpt: str | os.PathLike,
    *,
    split: str = "val",
    out: str | os.PathLike | None = None,
    workers: int = 0,
    real_labels: str | os.PathLike | None = None,
    runtime: str = "torch",
    memory_limit: int | None = None,
    **given: Any,
) -> RunEvaluation:
    """Score `model` (loaded from `ckpt`: a run folder whose run.yaml gives the settings, or any name)
    on `split` (val, dev, train or all) of its data, split as the run split it.

    `given` sets any EvalSettings field (data, seed, val_fraction, train_fraction, max_bad_fraction,
    device, precision, batch_size) in place of the run's. The report (top-1/top-5, loss, ECE, per-class
    accuracy, with `real_labels` the ImageNet-ReaL top-1, the training images scored, the images
    skipped, the settings) is returned and, with `out`, written there as JSON, confusion.json and
    confusion.png beside it. `runtime` "onnx": `model` is an exported file's, run on the CPU.
    """
    unknown = set(given) - set(SETTING_FLAGS)
    if unknown or split not in SPLITS:
        raise InputError(f"evaluate_run: unknown settings {sorted(unknown)} or split {split!r} (one of {SPLITS})")
    ckpt = str(ckpt)
    run, run_file = read_run(ckpt)
    settings = resolve_settings(given, run, run_file, ckpt)
    if split == "dev" and not settings.dev_fraction:
        raise InputError(f"--split dev: {ckpt} was not trained with a dev split (data.dev_fraction)")
    model, device, precision = ready_model(model, settings, runtime, workers, memory_limit, ckpt)
    splits, parts = scored_parts(model, settings, split, run, ckpt)
    overlap, found_by = trained_images(run, run_file, settings, splits, parts)
    evaluation, skipped, details = score(
        model, parts, splits.class_names, settings, split, workers, device, precision, real_labels, out
    )
    report = {
        "data": settings.data,
        "split": split,
        "runtime": runtime,
        "image_size": list(model.config.image_size),
        "metrics": {**evaluation.to_dict(), "ece": details.pop("ece")},
        **details,
        "trained_images_scored": overlap,  # null: no run.yaml to tell
        "trained_images_found_by": found_by,  # "content" (the run's train_digests.npy), "path", or null
        "skipped": [{"file": name, "reason": reason} for _, name, reason in skipped],
        "settings": {
            **dataclasses.asdict(settings),
            "precision": precision.name,
            "device": device.type,
            "from": str(run_file) if run_file else None,
        },
    }
    if out is not None:
        Path(out).write_text(json.dumps({"ckpt": ckpt, **report}, indent=2) + "\n")
    return RunEvaluation(evaluation, {"ckpt": ckpt, **report})


def ready_model(model, settings: EvalSettings, runtime: str, workers: int, memory_limit: int | None, ckpt: str):
    """The model on its device in eval mode and accelerated (an exported one on the CPU as it is), after
    checking that it and the batches in flight fit in memory; with the device and precision."""
    from vitlab.accel import accelerate
    from vitlab.memory.budget import batches_in_flight, check_memory
    from vitlab.runtime import resolve_device, resolve_precision

    if runtime != "torch" and settings.device not in ("auto", "cpu"):
        raise InputError(
            f"--runtime {runtime} runs {ckpt} at its exported size on the CPU: drop --device {settings.device}"
        )
    device = resolve_device("cpu" if runtime != "torch" else settings.device)
    precision = resolve_precision(settings.precision, device)
    in_flight = batches_in_flight(settings.batch_size, model.config.image_size, workers)
    check_memory(model.config, settings.batch_size, limit=memory_limit, source=ckpt, in_flight=in_flight)
    model = model.to(device).eval()
    if runtime == "torch":
        accelerate(model, precision.compute_dtype)
    return model, device, precision


def scored_parts(model, settings: EvalSettings, split: str, run: TrainConfig | None, ckpt: str):
    """The data's splits, split as the run split them, and the parts `split` scores; the model's
    classes checked against the data's."""
    from vitlab.evaluate.predict import eval_transform

    transform = eval_transform(model.config)
    if settings.dev_fraction and split == "val":
        log.info(
            "the run validated on a dev split of %g of its training images (its summary's val_top1; "
            "--split dev); --split val scores the source's validation split, the run's test split "
            "(its summary's test_top1)",
            settings.dev_fraction,
        )
    assert settings.data is not None  # resolve_settings refuses a run without one
    splits = load_datasets(
        settings.data,
        transform,
        transform,
        val_fraction=settings.val_fraction,
        seed=settings.seed,
        train_fraction=settings.train_fraction,
        dev_fraction=settings.dev_fraction,
        dev_split=settings.dev_split,
        max_bad_fraction=settings.max_bad_fraction,
        check_splits=(),  # the scored files are checked as they are read, during the evaluation (SkipLog)
    )
    check_classes(model.config, splits.class_names, ckpt, settings.data)
    if splits.held_out and run is None and split != "all":  # all: every image, however split
        log.info(
            "%s has no run.yaml: %s's validation images held out with seed %d, val_fraction %g "
            "(pass the training run's --seed and --val-fraction)",
            ckpt,
            settings.data,
            settings.seed,
            settings.val_fraction,
        )
    if split == "all":
        return splits, [part for part in (splits.train, splits.dev, splits.val) if part is not None]
    return splits, [getattr(splits, split)]


def trained_images(run: TrainConfig | None, run_file: Path | None, settings: EvalSettings, splits, parts):
    """How many scored images the run trained on, and how they were found ("content" or "path"); a
    warning where any; (None, None) without a run.yaml to tell."""
    from .outputs import DIGESTS_FILE
    from .trained_images import trained_images_scored

    if run is None or run_file is None:
        return None, None
    scored = sum(len(part.sample_keys()) for part in parts)
    overlap, found_by = trained_images_scored(
        run_file.parent, run.data.source, parts, run_training_split(run, settings, splits)
    )
    if overlap and found_by == "content":
        log.warning(
            "%d of the %d scored images were in the run's training set (the same bytes as images it trained "
            "on, %s); this is not a validation accuracy",
            overlap,
            scored,
            run_file.parent / DIGESTS_FILE,
        )
    elif overlap:
        log.warning(
            "%d of the %d scored images were in the run's training set (%s: seed %d, val_fraction %g, "
            "train_fraction %g); this is not a validation accuracy",
            overlap,
            scored,
            run_file,
            run.run.seed,
            run.data.val_fraction,
            run.data.train_fraction,
        )
    return overlap, found_by


def score(
    model, parts, class_names, settings: EvalSettings, split: str, workers: int, device, precision, real_labels, out
):
    """The evaluation of `parts`, the images skipped as unreadable, and the details (ECE, per-class
    accuracy, ReaL), confusion.json and .png, the reliability diagram, the per-class report and the
    gallery of misclassified images written beside `out`."""
    from vitlab.data.skipping import SkipLog, scored_dataset
    from vitlab.evaluate import evaluate
    from vitlab.evaluate.breakdown import PredictionLog
    from vitlab.evaluate.details import write_details
    from vitlab.evaluate.real import match_real_labels, read_real_labels
    from vitlab.progress import progress

    from .loader import eval_loader

    label_sets = None
    if real_labels is not None:  # refused before the evaluation, not after it
        real = read_real_labels(real_labels, model.config.num_classes)
        keys = [Path(key).name for part in parts for key in part.sample_keys()]
        label_sets = match_real_labels(keys, real, real_labels)
    dataset, collate = scored_dataset(parts)
    loader = eval_loader(dataset, settings.batch_size, workers, device.type == "cuda", collate)
    checked = SkipLog(loader, len(dataset), settings.max_bad_fraction, f"{settings.data} {split}")
    predictions = PredictionLog()
    batches = progress(checked if collate else loader, "eval", total=len(loader))
    result = evaluate(model, batches, device=device, autocast=precision.autocast, on_batch=predictions)
    if label_sets is not None and checked.skipped:  # the ReaL lists of the images scored
        gaps = {index for index, _, _ in checked.skipped}
        label_sets = [labels for index, labels in enumerate(label_sets) if index not in gaps]
    names = output_names(model.config, class_names)
    details = write_details(predictions, names, Path(out).parent if out is not None else None, real=label_sets)
    if out is not None:
        from vitlab.evaluate.gallery import write_gallery

        details["files"].append(write_gallery(parts, checked.skipped, predictions, names, Path(out).parent))
    return result, checked.skipped, details


def output_names(config, data_names: Sequence[str]) -> list[str]:
    """A name for each of the model's outputs: its own, else the data's, numbered past the data's classes
    (a model with more outputs than the data has classes can predict one the data lacks)."""
    if config.class_names:
        return [str(n) for n in config.class_names]
    names = [str(n) for n in data_names][: config.num_classes]
    return names + [str(k) for k in range(len(names), config.num_classes)]


def run_training_split(run: TrainConfig, settings: EvalSettings, splits):
    """The run's training split as its data lists it now: the evaluation's own where it split the data as
    the run did, else listed again (nothing decoded); None where it cannot be listed."""
    same = (settings.data, settings.seed, settings.val_fraction, settings.train_fraction) == (
        run.data.source,
        run.run.seed,
        run.data.val_fraction,
        run.data.train_fraction,
    )  # dev: always the run's
    if same:
        return splits.train
    try:
        return load_datasets(run.data.source, None, None, **run_split(run), check_splits=()).train
    except (OSError, ValueError) as error:
        log.warning("cannot list the run's training data %s (%s)", run.data.source, error)
        return None


def preview(names: Sequence[Any], count: int = 5) -> str:
    """The first few of a list of names and how many there are: "[a, b, ...] (10)"."""
    shown = ", ".join(map(str, names[:count]))
    return f"[{shown}{', ...' if len(names) > count else ''}] ({len(names)})"


def check_classes(config, data_names: list[str], ckpt: str, data: str) -> None:
    """The model's outputs must be the data's classes. Its class names must be the data's, or (a
    catalogue model) ImageNet-1k's beside an ImageNet folder of WordNet IDs, matched by position. A
    model that records no names (an imported .npz, a bare state dict) is scored by position, output k
    as the data's k-th class: said in the log, and refused where the data has more classes than it has
    outputs."""
    from vitlab.weights.pretrained import imagenet_class_names, imagenet_folders

    names = config.class_names
    if names is not None:
        if list(names) == list(data_names):
            return
        if imagenet_folders(data_names) and list(names) == imagenet_class_names():
            log.info("%s's classes are ImageNet-1k's WordNet IDs, in the order of %s's classes", data, ckpt)
            return
        raise ValueError(f"{ckpt} was trained on classes {preview(names)}, but {data} has {preview(data_names)}")
    if len(data_names) > config.num_classes:
        raise ValueError(
            f"{ckpt} has {config.num_classes} outputs and records no class names, but {data} has "
            f"{preview(data_names)} classes: {data_names[config.num_classes]!r} and those after it cannot be scored"
        )
    extra = config.num_classes - len(data_names)
    log.info(
        "%s records no class names: output k is taken as %s's k-th class, %s in order%s",
        ckpt,
        data,
        preview(data_names),
        f"; a prediction among its {extra} outputs past them counts as wrong" if extra else "",
    )
