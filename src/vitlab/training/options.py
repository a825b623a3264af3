"""The sections of a run's config (TrainConfig's model, data, optim, schedule, run and objective; the
augment section is vitlab.data.augmentation's AugmentSpec), each option declared once as its field:
its help, its flag, its range and whether a resumed run may change it (vitlab.config_options.option).
The command line's flags, the range checks and the resumable settings are derived from these."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Literal

from vitlab.config_fields import CROP_PCT_RANGE, SEED_RANGE, Interpolation, Range, workers_range
from vitlab.config_options import option
from vitlab.data.splits import HoldOut
from vitlab.model.config import GapNorm, PositionEmbeddingKind
from vitlab.runtime import Device, PrecisionName

# The model's pools that give one vector per image (its "none" keeps every token: nothing to train a label on).
TrainablePooling = Literal["token", "gap", "flatten", "max", "avgmax"]
DataParallel = Literal["ddp", "fsdp"]  # under torchrun: replicate the model, or shard it (distributed.py)
# The evaluation numbers a run can keep its best model by (best.py); val_loss is lowest-best, the others highest.
BestMetric = Literal["val_top1", "val_top5", "val_loss"]
ObjectiveName = Literal["classify", "mpp"]  # what a run learns from its images (objectives.py)
# Masked patch prediction's targets (paper Appendix B.1.2): the 3-bit mean colour (the paper's), a
# 4x4 downsized patch of 3-bit colours, or L2 regression of the whole patch (masked_patch.py).
MppTarget = Literal["mean-color", "4x4", "l2"]
DecodeDevice = Literal["cpu", "cuda"]  # where training images are decoded and augmented (data.decode_device)
CKPT_HELP = "anything vitlab.load reads: model folder, file (.npz, .pth, .safetensors), MODEL:TAG, hf://ORG/NAME"
MEMORY_LIMIT_HELP = "largest model + batch accepted, in GiB (default: half the memory available)"


@dataclass
class ModelSpec:
    """What to train: a variant of the size table, or a checkpoint to fine-tune (`init`).

    Architecture fields left at None keep the variant's (or the checkpoint's) value.
    """

    variant: str = option(
        "Ti/16",
        flags=("--model",),
        commands=("train",),
        metavar="VARIANT",
        help="variant such as Ti/16 or B/16 (default: the recipe's)",
    )
    init: str | None = option(
        None,
        flags=("--ckpt", "--init"),  # --ckpt as every command that reads a model spells it; --init, its earlier name
        commands=("finetune",),
        metavar="CKPT",
        help=CKPT_HELP,
    )  # anything vitlab.load accepts; fine-tuning starts from it
    image_size: int | tuple[int, int] | None = option(
        None,
        flags=("--image-size",),
        metavar="N",
        help="input resolution (default: the variant's 224, or the checkpoint's)",
    )
    dim: int | None = option(None, help="the width D (Table 1)")
    depth: int | None = option(None, help="the number of layers L (Table 1)")
    num_heads: int | None = option(None, help="attention heads (Table 1)")
    mlp_dim: int | None = option(None, help="the MLP's hidden width (Table 1)")
    head_dim: int | None = option(None, help="one head's width (default: dim // num_heads)")
    pool: TrainablePooling | None = option(
        None, help="the class token, GAP or flatten (Sec. 3.1, Appendix D.3), or timm's max / avgmax"
    )
    gap_norm: GapNorm | None = option(
        None, help="GAP's LayerNorm: on every token before the mean (vit_jax's, the default) or on the mean (timm's)"
    )
    pos_embed: PositionEmbeddingKind | None = option(None, help="the kind of position embedding (Table 8)")
    representation_size: int | None = option(None, help="the pre-training head's tanh hidden layer")
    head_hidden: tuple[int, ...] | None = option(None, help="extra GELU layers of an MLP head (the Keras example's)")
    mlp_out_act: bool | None = option(None, help="GELU after the MLP's second dense too (the Keras example's)")
    # Regularisation (Appendix B.1); these keep a checkpoint's shapes, so fine-tuning may set them.
    dropout: float | None = option(None, help="dropout after every dense layer but qkv, and after adding E_pos")
    attn_dropout: float | None = option(None, help="dropout of the attention weights")
    drop_path: float | None = option(None, help="stochastic depth, growing linearly to this rate")
    head_dropout: float | None = option(None, help="dropout before the head")
    embed_dropout: bool | None = option(None, help="dropout after adding E_pos")
    proj_dropout: bool | None = option(None, help="dropout after the attention's output projection")
    trainable_blocks: int | None = option(
        None,
        flags=("--trainable-blocks",),
        metavar="K",
        help="train only the last K blocks and the head, freeze the rest; 0: the head alone (for "
        "a logistic-regression probe on fixed features see vitlab fewshot)",
        range=Range(0, or_null=True),
    )

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

    source: str = option(
        "digits",
        flags=("--data",),
        metavar="SRC",
        help="digits | [imagefolder:]DIR | cifar10:DIR | cifar100:DIR | [wds:]SHARDS | hf:NAME[:SPLIT]",
    )
    batch_size: int = option(
        128,
        flags=("--batch-size",),
        metavar="N",
        help="images per optimiser step",
        range=Range(0, low_open=True),
    )  # split over optim.grad_accum micro-batches
    eval_batch_size: int | None = option(
        None,
        help="images per evaluation batch (default: twice the micro-batch)",
        range=Range(0, low_open=True),
        resumable=True,
    )
    val_fraction: float = option(
        0.2, help="held out when the source has no validation split", range=Range(0, 1, low_open=True, high_open=True)
    )
    train_fraction: float = option(
        1.0,
        help="train on this class-balanced share of the training split (seeded by run.seed)",
        range=Range(0, 1, low_open=True),
    )
    # A development split held out of the training split: the run validates on it, and the source's
    # own validation split becomes the test split, evaluated once at the end (summary test_top1).
    dev_fraction: float | None = option(
        None,
        help="the share of the training split held out as a development split",
        range=Range(0, 1, low_open=True, high_open=True, or_null=True),
    )
    # "stratified": seeded and class-balanced (paper Appendix B.1.1); "last": the last images, as
    # Keras' validation_split.
    dev_split: HoldOut = option("stratified", help="how the development split is chosen")
    workers: int = option(
        0, flags=("--workers",), metavar="N", help="data-loader worker processes", range=workers_range(), resumable=True
    )
    download: bool = option(False, flags=("--download",), help="fetch CIFAR-10/100 if missing", resumable=True)
    max_bad_fraction: float = option(
        0.01, help="the share of unreadable images a run skips before it stops", range=Range(0, 1, high_open=True)
    )
    mean: tuple[float, float, float] | None = option(None, help="normalisation mean stored with the model")
    std: tuple[float, float, float] | None = option(None, help="normalisation std stored with the model")
    crop_pct: float | None = option(None, help="evaluation's centre crop share", range=CROP_PCT_RANGE)
    interpolation: Interpolation | None = option(None, help="evaluation's resize interpolation")
    # "cuda": decode, crop, flip, RandAugment, normalise, erase on the training GPU (data/device_decode.py); a run
    # that trains on the CPU, or whose source holds decoded pixels, uses the CPU pipeline and logs it.
    decode_device: DecodeDevice = option(
        "cpu",
        flags=("--gpu-decode",),
        const="cuda",
        help="decode JPEGs, crop, flip, RandAugment, normalise and erase on the training GPU (data.decode_device=cuda); "
        "a run on the CPU falls back to the CPU pipeline and logs it",
    )


@dataclass
class OptimSpec:
    name: Literal["sgd", "adam", "adamw", "tfa_adamw"] = option(
        "adamw", help="the optimiser; tfa_adamw: TensorFlow Addons' (optim.py)"
    )
    lr: float = option(1e-3, flags=("--lr",), metavar="X", help="peak learning rate", range=Range(0, low_open=True))
    weight_decay: float = option(
        0.0, help="never on norms, biases, tokens or position embeddings (but with tfa_adamw)", range=Range(0)
    )
    betas: tuple[float, float] = option((0.9, 0.999), help="Adam's betas")
    eps: float = option(1e-8, help="Adam's epsilon", range=Range(0, low_open=True))
    momentum: float = option(0.9, help="SGD only", range=Range(0, 1, high_open=True))
    grad_clip: float | None = option(
        1.0, help="the global gradient norm's limit", range=Range(0, low_open=True, or_null=True)
    )
    grad_accum: int = option(
        1, flags=("--grad-accum",), metavar="N", help="micro-batches per optimiser step", range=Range(1)
    )
    ema_decay: float | None = option(
        None,
        flags=("--ema",),
        const=0.9999,
        metavar="DECAY",
        help="average the weights (Polyak/EMA; default decay 0.9999)",
        range=Range(0, 1, low_open=True, high_open=True, or_null=True),
    )  # evaluated and saved if set
    layer_decay: float | None = option(
        None,
        flags=("--layer-decay",),
        metavar="X",
        help="layer-wise learning-rate decay (BEiT/MAE fine-tuning): of n layers, layer l trains at lr * X^(n-1-l)",
        range=Range(0, 1, low_open=True, or_null=True),
    )


Decay = Literal["cosine", "linear", "constant"]  # the learning rate after warm-up (optim.py)


@dataclass
class ScheduleSpec:
    """Length of the run and the learning-rate schedule: linear warm-up, then decay."""

    epochs: int | None = option(
        None, flags=("--epochs",), metavar="N", help="passes over the training images", range=Range(0, low_open=True)
    )
    steps: int | None = option(
        None, flags=("--steps",), metavar="N", help="optimiser steps", range=Range(0, low_open=True)
    )  # exactly one of epochs / steps
    warmup_steps: int = option(0, help="linear warm-up, in optimiser steps", range=Range(0))
    warmup_epochs: float = option(0.0, help="linear warm-up, in epochs", range=Range(0))
    decay: Decay = option("cosine", help="the learning rate after warm-up")
    end_lr_ratio: float = option(0.0, help="final learning rate as a fraction of the peak", range=Range(0, 1))


@dataclass
class RunSpec:
    """How the run executes; none of this changes what is learned except seed and precision."""

    out: str | None = option(
        None, flags=("--out",), metavar="DIR", help="output folder: model, metrics, plot, checkpoints", resumable=True
    )
    seed: int = option(
        0,
        flags=("--seed",),
        metavar="N",
        help="the seed of the weights, the data order and the augmentation",
        range=SEED_RANGE,
    )
    device: Device = option("auto", flags=("--device",), help="where to train (default: auto)", resumable=True)
    precision: PrecisionName = option(
        "auto",
        flags=("--precision",),
        help="auto: bf16 on GPUs with bf16, fp16 on other GPUs, fp32 on CPU",
        resumable=True,
    )
    eval_every: int | None = option(
        None,
        flags=("--eval-every",),
        metavar="STEPS",
        help="steps between evaluations (default: every epoch)",
        range=Range(0, low_open=True),
        resumable=True,
    )
    log_every: int = option(
        50, help="steps between log lines when stderr is not a terminal", range=Range(0, low_open=True), resumable=True
    )
    ckpt_every_steps: int | None = option(
        None,
        flags=("--ckpt-every-steps",),
        metavar="N",
        help="besides every evaluation and the end of the run",
        range=Range(0, low_open=True),
        resumable=True,
    )
    ckpt_every_minutes: float | None = option(
        None,
        flags=("--ckpt-every-minutes",),
        metavar="M",
        help="also every M minutes of training",
        range=Range(0, low_open=True),
        resumable=True,
    )
    keep_ckpts: int = option(
        3, flags=("--keep-ckpts",), metavar="K", help="checkpoints kept (newest)", range=Range(1), resumable=True
    )
    max_bad_steps: int = option(
        10,
        flags=("--max-bad-steps",),
        metavar="N",
        help="stop after N steps in a row with a non-finite loss or gradient (each is skipped)",
        range=Range(1),
        resumable=True,
    )
    resume: bool = option(False, flags=("--resume",), help="continue from DIR/checkpoints/latest", resumable=True)
    compile: bool = option(False, flags=("--compile",), help="torch.compile the model", resumable=True)
    grad_checkpointing: bool = option(
        False,
        flags=("--grad-checkpointing", "--grad-ckpt"),
        help="gradient checkpointing (recompute activations in the backward pass)",
        resumable=True,
    )
    keep_best: bool = option(
        False, help="end with the weights of the evaluation with the best val top-1 (Keras' save_best_only)"
    )
    data_parallel: DataParallel = option(
        "ddp",
        flags=("--data-parallel",),
        help="under torchrun: ddp copies the model to every process, fsdp shards it (default ddp)",
    )
    threads: int | None = option(
        None,
        flags=("--threads",),
        metavar="N",
        help="CPU threads for torch",
        range=Range(1, or_null=True),
        resumable=True,
    )  # torch.set_num_threads during fit; None keeps torch's (one per core)
    memory_limit: float | None = option(
        None,
        flags=("--memory-limit",),
        metavar="GIB",
        help=MEMORY_LIMIT_HELP,
        range=Range(0, low_open=True, unit="GiB", or_null=True),
        resumable=True,
    )
    # What a run keeps and logs besides the last model (best.py, run_logs.py).
    keep_best_by: BestMetric | None = option(
        None,
        flags=("--keep-best-by",),
        help="also keep the best model by this metric in DIR/best/ (val_loss: lowest)",
    )
    early_stop_patience: int | None = option(
        None,
        flags=("--early-stop-patience",),
        metavar="N",
        help="stop after N evaluations without a better --keep-best-by metric (default val_top1)",
        range=Range(1, or_null=True),
    )
    tensorboard: bool = option(
        False,
        flags=("--tensorboard",),
        help="write TensorBoard event files to DIR/tensorboard (metrics.csv is always written)",
        resumable=True,
    )

    # When the training loop evaluates and writes a checkpoint: what eval_every and ckpt_every_* mean.
    def evaluation_due(self, step: int, total_steps: int, epoch_ended: bool) -> bool:
        """At the last step, every eval_every steps, or (without it) at the end of every epoch."""
        every = self.eval_every
        return step == total_steps or (every is not None and step % every == 0) or (every is None and epoch_ended)

    def checkpoint_due(
        self, step: int, *, evaluated: bool, stopping: bool, seconds_since: float, skipping: bool
    ) -> bool:
        """At every evaluation, every ckpt_every_steps / _minutes and on a stop signal; never while steps
        are being skipped as non-finite, so that the last good checkpoint survives --keep-ckpts."""
        if skipping:
            return False
        every, minutes = self.ckpt_every_steps, self.ckpt_every_minutes
        return bool(
            evaluated or stopping or (every and step % every == 0) or (minutes and seconds_since >= 60 * minutes)
        )


@dataclass
class ObjectiveSpec:
    """What the loss asks of the model: the labels (`classify`), or masked patch prediction (`mpp`,
    self-supervised: paper Sec. 4.6, Appendix B.1.2), which never reads the labels."""

    name: ObjectiveName = option(
        "classify",
        flags=("--objective",),
        help="classify: the labels (default); mpp: masked patch prediction, self-supervised (paper Sec. 4.6)",
    )
    mpp_target: MppTarget = option(
        "mean-color",
        flags=("--mpp-target",),
        help="mpp's target: the 3-bit mean colour (default, the paper's), a 4x4 patch of 3-bit colours, L2 on pixels",
    )
