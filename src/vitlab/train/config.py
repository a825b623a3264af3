"""The run configuration: one typed dataclass per part of a run, grouped in TrainConfig.

A recipe (recipes.py) builds a TrainConfig; a YAML file (`--config`) and single fields
(`--set optim.lr=0.01`) change it; the resolved result is written to DIR/run.yaml, which `--config`
reads back to repeat the run. Every value is checked against its field's type and range, and a
bad one is reported in one line naming the key, the value and where it came from.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from vitlab import textfiles

# The engine that sets and reads these configs; what this file does not use stays importable from here.
from vitlab.config_fields import (  # noqa: F401
    CROP_PCT_RULE,
    STD_RULE,
    ConfigError,
    Interpolation,
    apply_mapping,
    as_sections,
    coerce,
    crop_pct_ok,
    describe,
    finite_checks,
    lookup,
    plain,
    sections,
    set_value,
    show,
    std_ok,
)
from vitlab.data.keras_augment import FillMode
from vitlab.data.splits import HoldOut
from vitlab.model.config import Pooling, PositionEmbeddingKind
from vitlab.model.runtime import Device, PrecisionName
from vitlab.textfiles import parse_assignment  # noqa: F401

DataParallel = Literal["ddp", "fsdp"]  # under torchrun: replicate the model, or shard it (distributed.py)
# The evaluation numbers a run can keep its best model by (best.py); val_loss is lowest-best, the others highest.
BestMetric = Literal["val_top1", "val_top5", "val_loss"]
ObjectiveName = Literal["classify", "mpp"]  # what a run learns from its images (objectives.py)
# Masked patch prediction's targets (paper Appendix B.1.2): the 3-bit mean colour (the paper's), a
# 4x4 downsized patch of 3-bit colours, or L2 regression of the whole patch (masked_patch.py).
MppTarget = Literal["mean-color", "4x4", "l2"]
DecodeDevice = Literal["cpu", "cuda"]  # where training images are decoded and augmented (data.decode_device)


@dataclass
class ModelSpec:
    """What to train: a variant of the size table, or a checkpoint to fine-tune (`init`).

    Architecture fields left at None keep the variant's (or the checkpoint's) value.
    """

    variant: str = "Ti/16"
    init: str | None = None  # anything vitlab.load accepts; fine-tuning starts from it
    image_size: int | tuple[int, int] | None = None  # None: the variant's 224 or the checkpoint's size
    dim: int | None = None
    depth: int | None = None
    num_heads: int | None = None
    mlp_dim: int | None = None
    head_dim: int | None = None
    pool: Pooling | None = None
    pos_embed: PositionEmbeddingKind | None = None
    representation_size: int | None = None
    head_hidden: tuple[int, ...] | None = None
    mlp_out_act: bool | None = None
    # Regularisation (Appendix B.1); these keep a checkpoint's shapes, so fine-tuning may set them.
    dropout: float | None = None
    attn_dropout: float | None = None
    drop_path: float | None = None
    head_dropout: float | None = None
    embed_dropout: bool | None = None  # dropout after adding E_pos
    proj_dropout: bool | None = None  # dropout after the attention's output projection
    # Fine-tune only the last K blocks (with the final norm) and the head; 0: the head alone, on frozen
    # features (for logistic regression on fixed features use `vitlab fewshot`'s linear probe); None: all.
    trainable_blocks: int | None = None

    REGULARISATION: typing.ClassVar[tuple[str, ...]] = (
        "dropout",
        "attn_dropout",
        "drop_path",
        "head_dropout",
        "embed_dropout",
        "proj_dropout",
    )

    def options(self) -> dict[str, Any]:
        """The ViTConfig fields this spec sets (everything but variant, init, image_size and trainable_blocks)."""
        skip = ("variant", "init", "image_size", "trainable_blocks")
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in skip and getattr(self, f.name) is not None
        }


@dataclass
class DataSpec:
    """Where the images come from, how they are batched, and the evaluation preprocessing that is
    stored with the model (None: the checkpoint's, or vitlab's default for a new model)."""

    source: str = "digits"
    batch_size: int = 128  # images per optimiser step, split over optim.grad_accum micro-batches
    eval_batch_size: int | None = None  # None: twice the micro-batch
    val_fraction: float = 0.2  # held out when the source has no validation split
    train_fraction: float = 1.0  # train on this class-balanced share of the training split (seeded by run.seed)
    # A development split held out of the training split: the run validates on it, and the source's
    # own validation split becomes the test split, evaluated once at the end (summary test_top1).
    # "stratified": seeded and class-balanced (paper Appendix B.1.1); "last": the last images, as
    # Keras' validation_split.
    dev_fraction: float | None = None
    dev_split: HoldOut = "stratified"
    workers: int = 0
    download: bool = False
    max_bad_fraction: float = 0.01
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    crop_pct: float | None = None
    interpolation: Interpolation | None = None
    # "cuda": decode, crop, flip, RandAugment, normalise, erase on the training GPU (data/device_decode.py); a run
    # that trains on the CPU, or whose source holds decoded pixels, uses the CPU pipeline and logs it.
    decode_device: DecodeDevice = "cpu"


@dataclass
class AugmentSpec:
    """Training-time augmentation and the loss's label treatment."""

    crop_scale: tuple[float, float] = (0.05, 1.0)  # inception crop area range (vit_jax's default)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    hflip: bool = True
    randaugment: tuple[int, int] | None = None  # (number of ops, magnitude), e.g. (2, 10)
    # Keras' RandomRotation and RandomZoom (data/keras_augment.py), after the crop, flip and normalisation.
    rotation: float = 0.0  # degrees either way (Keras' factor x 360)
    zoom: float = 0.0  # a zoom per axis, each uniform in 1 +- zoom
    fill_mode: FillMode = "reflect"  # what rotation and zoom show beyond the border
    # timm's --reprob: the chance that a random rectangle of the normalised image is replaced by
    # per-pixel normal noise (timm's "pixel" mode, train.py's default; transforms.py).
    reprob: float = 0.0
    # Repeated augmentation (DeiT's RASampler): each image of the epoch's order comes `repeats` times
    # in a row, each copy augmented differently; the epoch keeps its length, as DeiT's does (loader.py).
    repeats: int = 1
    mixup: float = 0.0  # Beta(alpha, alpha); 0 turns it off
    cutmix: float = 0.0
    label_smoothing: float = 0.0


@dataclass
class OptimSpec:
    name: Literal["sgd", "adam", "adamw", "tfa_adamw"] = "adamw"  # tfa_adamw: TensorFlow Addons' (optim.py)
    lr: float = 1e-3
    weight_decay: float = 0.0  # never on norms, biases, tokens or position embeddings (but with tfa_adamw)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    momentum: float = 0.9  # SGD only
    grad_clip: float | None = 1.0  # global gradient norm
    grad_accum: int = 1
    ema_decay: float | None = None  # Polyak / EMA averaging of the weights; evaluated and saved if set
    layer_decay: float | None = None  # layer-wise learning-rate decay (BEiT / MAE fine-tuning, optim.py)


Decay = Literal["cosine", "linear", "constant"]  # the learning rate after warm-up (optim.py)


@dataclass
class ScheduleSpec:
    """Length of the run and the learning-rate schedule: linear warm-up, then decay."""

    epochs: int | None = None
    steps: int | None = None  # optimiser steps; exactly one of epochs / steps
    warmup_steps: int = 0
    warmup_epochs: float = 0.0
    decay: Decay = "cosine"
    end_lr_ratio: float = 0.0  # final learning rate as a fraction of the peak


@dataclass
class RunSpec:
    """How the run executes; none of this changes what is learned except seed and precision."""

    out: str | None = None
    seed: int = 0
    device: Device = "auto"
    precision: PrecisionName = "auto"
    eval_every: int | None = None  # steps; None: at the end of every epoch
    log_every: int = 50  # steps between log lines when stderr is not a terminal
    ckpt_every_steps: int | None = None  # besides every evaluation and the end of the run
    ckpt_every_minutes: float | None = None
    keep_ckpts: int = 3
    max_bad_steps: int = 10  # non-finite loss/gradient steps in a row that stop the run (each is skipped)
    resume: bool = False
    compile: bool = False
    grad_checkpointing: bool = False
    keep_best: bool = False  # end with the weights of the evaluation with the best val top-1 (Keras' save_best_only)
    data_parallel: DataParallel = "ddp"  # under torchrun: replicate the model, or shard it (L, H)
    threads: int | None = None  # torch.set_num_threads during fit; None keeps torch's (one per core)
    memory_limit: float | None = None  # GiB the model and a batch may take; None: half the memory available
    # What a run keeps and logs besides the last model (best.py, run_logs.py).
    keep_best_by: BestMetric | None = None  # DIR/best/: the model of the best evaluation by this metric
    early_stop_patience: int | None = None  # stop after N evaluations without a better keep_best_by (or val_top1)
    tensorboard: bool = False  # DIR/tensorboard/: event files of the per-step and evaluation numbers


@dataclass
class ObjectiveSpec:
    """What the loss asks of the model: the labels (`classify`), or masked patch prediction (`mpp`,
    self-supervised: paper Sec. 4.6, Appendix B.1.2), which never reads the labels."""

    name: ObjectiveName = "classify"
    mpp_target: MppTarget = "mean-color"  # mpp only


@dataclass
class TrainConfig:
    recipe: str = "custom"
    model: ModelSpec = field(default_factory=ModelSpec)
    data: DataSpec = field(default_factory=DataSpec)
    augment: AugmentSpec = field(default_factory=AugmentSpec)
    optim: OptimSpec = field(default_factory=OptimSpec)
    schedule: ScheduleSpec = field(default_factory=ScheduleSpec)
    run: RunSpec = field(default_factory=RunSpec)
    objective: ObjectiveSpec = field(default_factory=ObjectiveSpec)

    # How vitlab.config_fields sets keys. Setting one of a pair to a value clears the other: --steps
    # replaces a recipe's epochs. A warm-up of 0 means none and leaves the other warm-up alone; a length
    # of 0 still clears the other length, so that its own range check names the flag.
    EXCLUSIVE: typing.ClassVar[dict[str, str]] = {
        "schedule.steps": "schedule.epochs",
        "schedule.epochs": "schedule.steps",
        "schedule.warmup_steps": "schedule.warmup_epochs",
        "schedule.warmup_epochs": "schedule.warmup_steps",
    }
    ZERO_MEANS_UNSET: typing.ClassVar[frozenset[str]] = frozenset({"schedule.warmup_steps", "schedule.warmup_epochs"})
    SET_ELSEWHERE: typing.ClassVar[dict[str, str]] = {
        "recipe": "the recipe is chosen with --recipe or a top-level 'recipe:' key"
    }

    def validate(self, origins: Mapping[str, str] | None = None) -> TrainConfig:
        """Raise ConfigError naming the first out-of-range value (and, from `origins`, the file or
        flag that set it); returns self."""
        for key, ok, requirement in [*finite_checks(self), *_range_checks(self)]:
            if not ok:
                where = f"{origins[key]}: " if origins and key in origins else ""
                raise ConfigError(f"{where}{key}={plain(lookup(self, key))!r}: {requirement}")
        return self

    @property
    def micro_batch_size(self) -> int:
        return self.data.batch_size // self.optim.grad_accum

    @property
    def evaluation_batch_size(self) -> int:
        """data.eval_batch_size, else twice the micro-batch (no gradients to keep)."""
        return self.data.eval_batch_size or 2 * self.micro_batch_size

    def to_dict(self) -> dict[str, Any]:
        return plain(dataclasses.asdict(self))

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


SECTIONS: dict[str, type] = sections(TrainConfig)


def _range_checks(config: TrainConfig) -> list[tuple[str, bool, str]]:
    m, d, a, o, s, r = config.model, config.data, config.augment, config.optim, config.schedule, config.run
    positive = "must be > 0"
    fraction = "must be in [0, 1)"
    return [
        *_objective_checks(config),
        ("model.trainable_blocks", m.trainable_blocks is None or m.trainable_blocks >= 0, "must be >= 0 or null"),
        ("data.source", bool(d.source.strip()), "must name a data source"),
        ("data.batch_size", d.batch_size > 0, positive),
        ("data.eval_batch_size", d.eval_batch_size is None or d.eval_batch_size > 0, positive),
        ("data.val_fraction", 0.0 < d.val_fraction < 1.0, "must be in (0, 1)"),
        ("data.train_fraction", 0.0 < d.train_fraction <= 1.0, "must be in (0, 1]"),
        ("data.dev_fraction", d.dev_fraction is None or 0.0 < d.dev_fraction < 1.0, "must be in (0, 1) or null"),
        ("data.workers", d.workers >= 0, "must be >= 0"),
        ("data.max_bad_fraction", 0.0 <= d.max_bad_fraction < 1.0, fraction),
        ("data.std", d.std is None or std_ok(d.std), STD_RULE),
        ("data.crop_pct", d.crop_pct is None or crop_pct_ok(d.crop_pct), CROP_PCT_RULE),
        ("augment.crop_scale", 0.0 < a.crop_scale[0] <= a.crop_scale[1] <= 1.0, "must satisfy 0 < min <= max <= 1"),
        ("augment.crop_ratio", 0.0 < a.crop_ratio[0] <= a.crop_ratio[1], "must satisfy 0 < min <= max"),
        (
            "augment.randaugment",
            a.randaugment is None or (a.randaugment[0] > 0 and 0 <= a.randaugment[1] <= 30),
            "must be (ops > 0, magnitude in 0..30)",
        ),
        ("augment.rotation", 0.0 <= a.rotation <= 180.0, "must be in [0, 180] degrees"),
        ("augment.zoom", 0.0 <= a.zoom < 1.0, fraction),
        ("augment.reprob", 0.0 <= a.reprob <= 1.0, "must be in [0, 1]"),
        ("augment.repeats", a.repeats >= 1, "must be >= 1"),
        ("augment.mixup", a.mixup >= 0.0, "must be >= 0"),
        ("augment.cutmix", a.cutmix >= 0.0, "must be >= 0"),
        ("augment.label_smoothing", 0.0 <= a.label_smoothing < 1.0, fraction),
        ("optim.lr", o.lr > 0.0, positive),
        ("optim.weight_decay", o.weight_decay >= 0.0, "must be >= 0"),
        ("optim.betas", all(0.0 <= b < 1.0 for b in o.betas), "must both be in [0, 1)"),
        ("optim.eps", o.eps > 0.0, positive),
        ("optim.momentum", 0.0 <= o.momentum < 1.0, fraction),
        ("optim.grad_clip", o.grad_clip is None or o.grad_clip > 0.0, "must be > 0 or null"),
        ("optim.grad_accum", o.grad_accum >= 1, "must be >= 1"),
        (
            "optim.grad_accum",
            o.grad_accum < 1 or d.batch_size % o.grad_accum == 0,  # (< 1 fails above)
            f"must divide data.batch_size={d.batch_size} into equal micro-batches",
        ),
        ("optim.layer_decay", o.layer_decay is None or 0.0 < o.layer_decay <= 1.0, "must be in (0, 1] or null"),
        (
            "optim.layer_decay",
            o.layer_decay is None or o.name != "tfa_adamw",
            "needs parameter groups; optim.name=tfa_adamw decays every variable alike",
        ),
        ("optim.ema_decay", o.ema_decay is None or 0.0 < o.ema_decay < 1.0, "must be in (0, 1) or null"),
        (
            "schedule.steps",
            (s.steps is None) != (s.epochs is None),
            "set exactly one of schedule.steps and schedule.epochs",
        ),
        ("schedule.steps", s.steps is None or s.steps > 0, positive),
        ("schedule.epochs", s.epochs is None or s.epochs > 0, positive),
        ("schedule.warmup_steps", s.warmup_steps >= 0, "must be >= 0"),
        ("schedule.warmup_epochs", s.warmup_epochs >= 0.0, "must be >= 0"),
        (
            "schedule.warmup_steps",
            s.warmup_steps == 0 or s.warmup_epochs == 0.0,
            "set schedule.warmup_steps or schedule.warmup_epochs, not both",
        ),
        ("schedule.end_lr_ratio", 0.0 <= s.end_lr_ratio <= 1.0, "must be in [0, 1]"),
        ("run.eval_every", r.eval_every is None or r.eval_every > 0, positive),
        ("run.log_every", r.log_every > 0, positive),
        ("run.ckpt_every_steps", r.ckpt_every_steps is None or r.ckpt_every_steps > 0, positive),
        ("run.ckpt_every_minutes", r.ckpt_every_minutes is None or r.ckpt_every_minutes > 0, positive),
        ("run.keep_ckpts", r.keep_ckpts >= 1, "must be >= 1"),
        ("run.max_bad_steps", r.max_bad_steps >= 1, "must be >= 1"),
        ("run.threads", r.threads is None or r.threads >= 1, "must be >= 1 or null"),
        ("run.memory_limit", r.memory_limit is None or r.memory_limit > 0, "must be > 0 GiB or null"),
        # best.py
        (
            "run.early_stop_patience",
            r.early_stop_patience is None or r.early_stop_patience >= 1,
            "must be >= 1 or null",
        ),
    ]


def _objective_checks(config: TrainConfig) -> list[tuple[str, bool, str]]:
    """What masked patch prediction cannot combine with: label mixing and smoothing (it reads no
    labels), and the best-weights outputs, which rank by class accuracy and would save the mpp head."""
    if config.objective.name != "mpp":
        return []
    a, r = config.augment, config.run
    no_labels = "must be 0 with objective.name=mpp (masked patch prediction reads no labels)"
    best = "is not available with objective.name=mpp (it ranks and saves class-prediction models)"
    return [
        ("augment.mixup", a.mixup == 0.0, no_labels),
        ("augment.cutmix", a.cutmix == 0.0, no_labels),
        ("augment.label_smoothing", a.label_smoothing == 0.0, no_labels),
        ("run.keep_best", not r.keep_best, best),
        ("run.keep_best_by", r.keep_best_by is None, best),
        ("run.early_stop_patience", r.early_stop_patience is None, best),
        (
            "run.compile",
            not r.compile,
            "is not applied to the masked-patch forward; leave it off with objective.name=mpp",
        ),
    ]


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML file of config sections (`--config`, a run.yaml), bounded and without aliases (textfiles.py)."""
    return as_sections(textfiles.read_config(path), str(path))


def read_run_config(path: str | Path) -> TrainConfig:
    """The resolved config a run wrote to DIR/run.yaml (it holds every field)."""
    document = read_yaml(path)
    config = apply_mapping(TrainConfig(), document, str(path))
    config.recipe = str(document.get("recipe", config.recipe))
    return config
