"""The model, data splits and loaders a TrainConfig asks for: from scratch or from model.init, with a
new head for the data's classes, the layers that stay frozen (model.trainable_blocks), and the
transforms of the model's preprocessing; and the callbacks its run settings turn on."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from vitlab.data import DataSplits, SplitPlan, load_datasets
from vitlab.data.datasets import EncodedImages, LabelledImages
from vitlab.data.device_decode import DeviceDecodedImages, DrawCrop, device_transform, unsupported_augmentation
from vitlab.data.given import GivenData
from vitlab.data.transforms import eval_transform, resolve_preprocessing, train_transform
from vitlab.memory.budget import attention_is_fused, batches_in_flight, check_memory
from vitlab.model import BiTConfig, BiTResNet, ConfigError, VisionTransformer, ViTConfig, config_for, create_untrained
from vitlab.runtime import resolve_device

from .callbacks import Callback, MetricsFile, ProgressBar
from .config import ModelSpec, TrainConfig
from .layer_groups import freeze_layers
from .loader import eval_loader, train_loader
from .processes import Processes, from_environment
from .run_logs import StepsCsv, TensorBoard
from .unfinished import load_model

log = logging.getLogger("vitlab")


def check_run(config: TrainConfig, architecture: ViTConfig | BiTConfig | None = None) -> TrainConfig:
    """ConfigError for what a valid config cannot do as a run: no output folder, both a checkpoint and
    an architecture to start from, weight averaging or best weights with a sharded model."""
    if not config.run.out:
        raise ConfigError("run.out: the output folder (--out) is required")
    if architecture is not None and config.model.init:
        raise ConfigError(
            f"model.init={config.model.init!r}: a run starts from a checkpoint or from an architecture, not both"
        )
    if config.run.data_parallel == "fsdp" and config.optim.ema_decay:
        raise ConfigError("optim.ema_decay: weight averaging needs the whole model, not run.data_parallel=fsdp")
    if config.run.data_parallel == "fsdp" and config.run.keep_best:
        raise ConfigError("run.keep_best: keeping the best weights needs the whole model, not run.data_parallel=fsdp")
    # best.py: DIR/best/ is written by process 0 from the whole model, and process 0 alone decides to stop.
    if config.run.data_parallel == "fsdp" and config.run.keep_best_by:
        raise ConfigError("run.keep_best_by: writing DIR/best/ needs the whole model, not run.data_parallel=fsdp")
    if config.objective.name == "mpp" and from_environment().world_size > 1:  # objectives.py calls the model itself
        raise ConfigError("objective.name=mpp: masked patch prediction runs in one process; not under torchrun")
    unsupported = unsupported_augmentation(config.augment) if config.data.decode_device == "cuda" else None
    if unsupported:
        raise ConfigError(
            f"augment.{unsupported}: data.decode_device='cuda' runs the crop, flip, RandAugment and erasing on the GPU; "
            f"{unsupported} runs in the CPU pipeline only (data.decode_device='cpu')"
        )
    if config.run.early_stop_patience and from_environment().world_size > 1:
        raise ConfigError("run.early_stop_patience: early stopping runs in one process; not under torchrun")
    return config


def run_folder(config: TrainConfig) -> Path:
    """run.out of a config that check_run accepted."""
    assert config.run.out, "check_run refuses a run without run.out"
    return Path(config.run.out)


def build_model_and_data(
    config: TrainConfig,
    architecture: ViTConfig | BiTConfig | None = None,
    processes: Processes = Processes(),
    precision: str = "fp32",
    given: GivenData | None = None,
) -> tuple[VisionTransformer | BiTResNet, DataSplits, Dataset | None]:
    """(model in train mode, splits, test split or None). With a development split
    (data.dev_fraction) the source's validation split becomes the test split. `processes` and
    `precision` (the resolved one) say where each process trains, for the memory check; `given`, the
    datasets that take data.source's place."""
    spec = config.model
    torch.manual_seed(config.run.seed)  # the initial weights depend on the seed alone
    if spec.init:
        model = _load_init(config)
        vit_config = model.config
    else:
        vit_config = architecture or scratch_config(spec)
    data = config.data
    preprocessing = resolve_preprocessing(
        vit_config.preprocessing, mean=data.mean, std=data.std, crop_pct=data.crop_pct, interpolation=data.interpolation
    )
    splits, test_set = _load_splits(config, vit_config, preprocessing, given)
    classes = _classes_to_learn(config, splits)
    model_config = vit_config.replace(num_classes=len(classes), class_names=classes or None)
    check_run_memory(config, model_config, processes, precision)  # before the model is allocated
    if spec.init:
        _replace_head(model, classes, spec.init)
        model.config = model.config.replace(preprocessing=preprocessing)
    else:
        torch.manual_seed(config.run.seed)
        model = create_untrained(model_config.replace(preprocessing=preprocessing))
    _log_run(config, splits, model)
    freeze_layers(model, spec.trainable_blocks)
    return model.train(), splits, test_set


def _load_splits(
    config: TrainConfig, vit_config: ViTConfig | BiTConfig, preprocessing: Any, given: GivenData | None = None
) -> tuple[DataSplits, Any]:
    """(splits, test split or None) of data.source (or of the `given` datasets) with the model's
    transforms; augmented on the GPU where data.decode_device asks and the source holds encoded images."""
    data = config.data
    cpu_transform = train_transform(vit_config.image_size, preprocessing, config.augment)
    on_device = data.decode_device == "cuda" and decodes_on_cuda(config)
    transforms = (
        device_transform(vit_config.image_size, preprocessing, config.augment) if on_device else cpu_transform,
        eval_transform(vit_config.image_size, preprocessing),
    )
    plan = SplitPlan(data.val_fraction, config.run.seed, data.train_fraction, data.dev_fraction, data.dev_split)
    if given is not None:
        splits = given.splits(*transforms, plan=plan)
    else:
        splits = load_datasets(
            data.source,
            *transforms,
            val_fraction=plan.val_fraction,
            seed=plan.seed,
            download=data.download,
            train_fraction=plan.train_fraction,
            dev_fraction=plan.dev_fraction,
            dev_split=plan.dev_split,
            max_bad_fraction=data.max_bad_fraction,
        )
    if on_device and not isinstance(splits.train, EncodedImages):
        log.warning(
            "data.decode_device='cuda': %s holds decoded pixels, so the CPU pipeline augments them", data.source
        )
        splits.train.transform = cpu_transform
    test_set = None
    if splits.dev is not None:  # paper Appendix B.1.1 / Keras validation_split: validate on a dev split
        test_set, splits.val = splits.val, splits.dev
    return splits, test_set


def _classes_to_learn(config: TrainConfig, splits: DataSplits) -> list[str]:
    """The class names the model's head predicts: the data's (at least 2), or none for an objective
    that trains no classifier."""
    names = list(splits.class_names)
    if len(names) < 2 and config.objective.name == "classify":  # one class: every prediction right, nothing learned
        raise ConfigError(
            f"data.source={config.data.source!r}: {len(names)} class ({', '.join(map(str, names))}); "
            "classification needs at least 2"
        )
    # Masked patch prediction trains no classifier: its model has none (fine-tuning attaches one).
    return names if config.objective.name == "classify" else []


def _replace_head(model: VisionTransformer | BiTResNet, classes: list[str], init: str) -> None:
    """Paper 3.2: a zero-initialised head for the new classes in place of model.init's."""
    before = "a representation layer and " if getattr(model.config, "representation_size", None) else ""
    old_classes = model.config.num_classes
    model.reset_classifier(len(classes), class_names=classes or None)
    log.info(
        "%s: new zero-initialised head: %d x %d (%d classes), replacing %sthe %d-class head",
        init,
        model.config.feature_dim,
        len(classes),
        len(classes),
        before,
        old_classes,
    )


def _log_run(config: TrainConfig, splits: DataSplits, model: VisionTransformer | BiTResNet) -> None:
    """One line naming the data and the model the run trains."""
    log.info(
        "%s: %d training and %d validation images, %d classes; model %s at %s px, %.2fM parameters",
        config.data.source,
        len(splits.train),
        len(splits.val),
        len(splits.class_names),
        model.config.name or "ViT",
        "x".join(map(str, model.config.image_size)),
        sum(p.numel() for p in model.parameters()) / 1e6,
    )


def check_run_memory(
    config: TrainConfig, model_config: ViTConfig | BiTConfig, processes: Processes, precision: str
) -> None:
    """ConfigError, before anything is allocated, when a process cannot hold its share of the run: its
    slice of the micro-batch (--batch-size / --grad-accum / processes), in the precision it trains in
    (autocast keeps bf16 / fp16 activations), attention as the kernel that will run keeps it
    (attention_is_fused), with gradient checkpointing if set and the parameters sharded under FSDP; on
    a GPU against its free memory, on a CPU against the machine's. The input batches its loaders hold
    (training, and evaluation while it runs) count against the host's memory, with those of every
    process on the machine. The refusal names the settings that make the batch."""
    world, device, run = processes.world_size, processes.device, config.run
    micro, evaluation = max(config.micro_batch_size // world, 1), -(-config.evaluation_batch_size // world)
    held = [batches_in_flight(size, model_config.image_size, config.data.workers) for size in (micro, evaluation)]
    half = precision in ("bf16", "fp16")
    over = f" over {world} processes" if world > 1 else ""
    shrink = "raise --grad-accum" + ("" if run.grad_checkpointing else " or pass --grad-checkpointing")
    size = config.model.image_size
    resized = (
        f"--image-size {size if isinstance(size, int) else 'x'.join(map(str, size))} (model.image_size of "
        f"{config.recipe}, unless given) resamples model.init to that size: pass a smaller one, or use a "
        "recipe without one to train at the checkpoint's; "
        if config.model.init and size is not None
        else ""
    )
    check_memory(
        model_config,
        micro,
        training=True,
        limit=None if run.memory_limit is None else int(run.memory_limit * 2**30),
        source="run.memory_limit",
        in_flight=sum(held),
        device=device,
        fused_attention=attention_is_fused(model_config, device, training=True, half=half),
        half=half,
        checkpointed=run.grad_checkpointing,
        shards=world if run.data_parallel == "fsdp" else 1,
        processes=processes.local_world_size,
        remedy=(
            f"{resized}--batch-size {config.data.batch_size} with --grad-accum {config.optim.grad_accum}{over} makes "
            f"micro-batches of {micro} per process: {shrink}"
        ),
    )


def decodes_on_cuda(config: TrainConfig) -> bool:
    """Whether data.decode_device='cuda' can be honoured: the run trains on a CUDA GPU. Otherwise the CPU
    pipeline decodes, and one line of the log says so (a config written for a GPU machine still runs)."""
    if resolve_device(config.run.device).type == "cuda":
        return True
    log.warning("data.decode_device='cuda': the run trains on the CPU (no CUDA GPU), so the CPU pipeline decodes")
    return False


def steps_per_epoch(config: TrainConfig, train_images: int) -> int:
    """Optimiser steps in one pass over the training images (a last partial batch is dropped)."""
    steps = train_images // config.data.batch_size
    if steps == 0:
        raise ConfigError(
            f"data.batch_size={config.data.batch_size} is larger than the {train_images} "
            f"training images of {config.data.source!r}; lower --batch-size"
        )
    return steps


def build_loaders(
    config: TrainConfig, splits: DataSplits, test_set: Dataset | None, pin_memory: bool, processes: Processes
) -> tuple[DataLoader, DataLoader, DataLoader | None]:
    """The training loader (micro-batches in the resumable order), the validation and the test loader."""
    micro, workers = config.micro_batch_size, config.data.workers
    train_set: LabelledImages | DeviceDecodedImages = splits.train
    collate = None
    if isinstance(splits.train.transform, DrawCrop):  # data.decode_device='cuda' on a CUDA run (device_decode.py)
        assert isinstance(splits.train, EncodedImages), splits.train
        train_set = DeviceDecodedImages(splits.train)
        collate = train_set.collate()
    eval_batch = config.evaluation_batch_size
    return (
        train_loader(
            train_set,
            micro,
            config.run.seed,
            workers,
            pin_memory,
            processes,
            repeats=config.augment.repeats,
            collate=collate,
        ),
        eval_loader(splits.val, eval_batch, workers, pin_memory, processes=processes),
        eval_loader(test_set, eval_batch, workers, pin_memory) if test_set is not None else None,
    )


def _load_init(config: TrainConfig) -> VisionTransformer | BiTResNet:
    spec = config.model
    assert spec.init is not None  # called only for a run with model.init
    fixed = sorted(set(spec.options()) - set(spec.REGULARISATION))
    if fixed:
        raise ConfigError(
            f"model.{fixed[0]} cannot change the architecture of model.init={spec.init!r}; "
            f"only the image size and {', '.join(spec.REGULARISATION)} can"
        )
    overrides = {name: value for name, value in spec.options().items()}
    if spec.image_size is not None:
        overrides["image_size"] = spec.image_size  # E_pos resampled in 2-D (paper 3.2)
    limit = config.run.memory_limit
    return load_model(spec.init, memory_limit=None if limit is None else int(limit * 2**30), **overrides)


def resumed_architecture(config: TrainConfig, state: dict) -> ViTConfig | None:
    """The architecture a run from scratch resumes with: its variant's, in the GAP order its checkpoint
    records (model_config.gap_norm) where model.gap_norm is unset, so that a run begun when timm's
    "after_pool" was the default continues with the model it trained. None: nothing to keep."""
    spec = config.model
    saved = (state.get("model_config") or {}).get("gap_norm")
    if spec.init or spec.gap_norm is not None or saved is None:
        return None
    architecture = scratch_config(spec)
    if not isinstance(architecture, ViTConfig) or architecture.pool != "gap" or architecture.gap_norm == saved:
        return None
    log.info(
        "--resume: the checkpoint's model pools by GAP with gap_norm=%r; keeping it (the default is now %r)",
        saved,
        architecture.gap_norm,
    )
    return architecture.replace(gap_norm=saved)


def scratch_config(spec: ModelSpec) -> ViTConfig | BiTConfig:
    """The ViTConfig of a new model: the variant with the spec's fields (num_classes comes later)."""
    options = spec.options()
    if spec.image_size is not None:
        options["image_size"] = spec.image_size
    config = config_for(spec.variant, num_classes=0, **options)
    resized = {"dim", "depth", "num_heads", "mlp_dim", "head_dim"} & set(options)
    return config.replace(name=None) if resized else config  # no longer the named variant


def build_callbacks(config: TrainConfig) -> list[Callback]:
    """Process 0's reporting: always ProgressBar, MetricsFile (metrics.jsonl), StepsCsv (metrics.csv);
    with run.tensorboard, TensorBoard. (The best-model tracker, best.py, is the trainer's.)"""
    run = config.run
    callbacks: list[Callback] = [ProgressBar(), MetricsFile(str(run.out)), StepsCsv(str(run.out))]
    if run.tensorboard:
        callbacks.append(TensorBoard(str(run.out)))
    return callbacks
