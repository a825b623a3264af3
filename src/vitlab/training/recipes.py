"""Recipes: the paper's training settings (paper_recipes.py), and three widely used others, as typed code.

Each recipe is a function returning a TrainConfig; its docstring says what it reproduces and what it
should reach. A name may carry parts after a colon: a dataset's row of the paper's tables
(vitlab.training.paper_tables) and a model, `paper-pretrain:imagenet21k:L/16`, `paper-finetune:pets`,
`paper-finetune:imagenet:H/14`, `paper-mpp:B/16`. A run of another length than its recipe's scales
the recipe's warm-up to it (`warmup_for_length`).

    vitlab train --recipe small-data --data cifar10:DATA --model Ti/4 --image-size 32 --out runs/c10
    vitlab finetune --recipe paper-finetune:cifar10 --ckpt B16.npz --data cifar10:DATA --out runs/ft
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from vitlab.model.config import ConfigError
from vitlab.suggestions import did_you_mean

from .config import AugmentSpec, DataSpec, ModelSpec, OptimSpec, RunSpec, ScheduleSpec, TrainConfig
from .paper_recipes import (
    paper_finetune,
    paper_mpp,
    paper_pretrain,
    warmup_at_length,
)
from .quoted_runs import quoted_warmup

log = logging.getLogger("vitlab")


def warmup_for_length(config: TrainConfig, recipe: TrainConfig) -> TrainConfig:
    """`config`, built from `recipe` with another run length and no warm-up of its own, given the warm-up
    of that length (both numbers logged): on a paper-finetune row a quoted run's at that length, else
    the recipe's share of its own length, as vit_jax's shorter runs do. A warm-up stated in steps over
    a length in epochs (Table 3's 10k steps for 7 or 14 epochs alike) stays as stated."""
    now, then = config.schedule, recipe.schedule
    if now.steps and then.steps and then.warmup_steps and now.steps != then.steps:
        base, _, rest = config.recipe.partition(":")
        row = rest.partition(":")[0] if base == "paper-finetune" else ""
        now.warmup_steps = warmup_at_length(row, now.steps, then.steps, then.warmup_steps)
        how = "as the quoted run of that length" if quoted_warmup(row, now.steps) is not None else "scaled"
        log.info(
            "%s: warm-up %d of %d steps (the recipe's: %d of %d; %s)",
            config.recipe,
            now.warmup_steps,
            now.steps,
            then.warmup_steps,
            then.steps,
            how,
        )
    elif now.epochs and then.epochs and then.warmup_epochs and now.epochs != then.epochs:
        now.warmup_epochs = then.warmup_epochs * now.epochs / then.epochs
        log.info(
            "%s: warm-up %g of %d epochs (the recipe's: %g of %d; scaled)",
            config.recipe,
            now.warmup_epochs,
            now.epochs,
            then.warmup_epochs,
            then.epochs,
        )
    return config


def small_data() -> TrainConfig:
    """Training from scratch on small data, AugReg / DeiT style (Steiner et al. 2021; Touvron et al. 2021).

    AdamW (lr 1e-3 for batch 128, weight decay 0.05), 5 warm-up epochs then cosine decay, RandAugment
    (2, 10) as timm's `rand-m10-n2` defines it (two of its 15 operations per image, each with
    probability 0.5 at full strength: rotation up to 30 degrees, shear 0.3, translation 45%;
    vitlab.data.randaugment), Mixup 0.8 and CutMix 1.0, label smoothing 0.1, stochastic depth 0.1, a gentler crop
    (area 35-100%) than ImageNet's because the images are small, 200 epochs. No published run has
    these settings, so none is quoted.
    """
    return TrainConfig(
        recipe="small-data",
        model=ModelSpec(variant="Ti/4", image_size=32, drop_path=0.1, dropout=0.0),
        data=DataSpec(batch_size=128),
        augment=AugmentSpec(
            crop_scale=(0.35, 1.0), hflip=True, randaugment=(2, 10), mixup=0.8, cutmix=1.0, label_smoothing=0.1
        ),
        optim=OptimSpec(name="adamw", lr=1e-3, weight_decay=0.05, betas=(0.9, 0.999), grad_clip=1.0),
        schedule=ScheduleSpec(epochs=200, warmup_epochs=5, decay="cosine"),
    )


def _keras_example_model() -> ModelSpec:
    """keras_example's network: no class token, the flattened patch outputs through an MLP head,
    dropout where Keras' layers have it and nowhere else."""
    return ModelSpec(
        variant="Ti/6",
        image_size=72,
        dim=64,
        depth=8,
        num_heads=4,
        head_dim=64,
        mlp_dim=128,
        mlp_out_act=True,
        pool="flatten",
        pos_embed="learned",
        head_hidden=(2048, 1024),
        head_dropout=0.5,
        dropout=0.1,
        attn_dropout=0.1,
        drop_path=0.0,
        embed_dropout=False,
        proj_dropout=False,
    )


def keras_example() -> TrainConfig:
    """The Keras example "Image classification with Vision Transformer" (Khalid Salama, keras.io, CIFAR-100;
    keras-io examples/vision/image_classification_with_vision_transformer.py, the TF 2.4 version).

    Widely copied, and unlike the paper: no class token; all 144 patch outputs are layer-normed,
    flattened and fed through dropout 0.5 and an MLP head of 2048 and 1024 GELU units, each followed
    by dropout 0.5. 72 px, P 6, 8 layers of width 64 with 4 heads of key size 64 and an MLP of
    Dense(128, gelu) -> Dense(64, gelu) (a GELU after both), dropout 0.1 after each MLP dense and on
    the attention weights, none after adding E_pos and none after the attention's output projection
    (Keras' PatchEncoder and MultiHeadAttention have neither). Pixels normalised with the CIFAR-100
    training mean/std (Keras' Normalization adapted to x_train), resized to 72 (bilinear), flipped,
    rotated by up to 0.02 turns (7.2 degrees) and zoomed by 1 +- 0.2 per axis, both filling with
    reflections (Keras' RandomRotation(0.02), RandomZoom(0.2, 0.2), fill_mode="reflect").
    tfa.optimizers.AdamW(lr 1e-3, weight_decay 1e-4): epsilon 1e-7, every variable decayed by 1e-4 of
    itself per step (not scaled by the learning rate); constant learning rate, no clipping; batch 256,
    100 epochs; `validation_split=0.1` (the last 10% of the training images validate) with the
    weights of the best epoch by validation accuracy kept (ModelCheckpoint(save_best_only=True)) and
    evaluated on the test set. Reaches: about 55% top-1 and 82% top-5 on the CIFAR-100 test set, as the
    example reports (summary test_top1, test_top5).

    Where it still differs from Keras: the weights start from vitlab's initialisation, not Keras'
    glorot-uniform kernels and U(-0.05, 0.05) position embeddings; and the last partial batch of each
    epoch is dropped (175 steps of 256 an epoch, where Keras takes 176, its last of 200 images).
    """
    return TrainConfig(
        recipe="keras-example",
        model=_keras_example_model(),
        data=DataSpec(
            batch_size=256,
            mean=(0.5071, 0.4865, 0.4409),
            std=(0.2673, 0.2564, 0.2762),
            crop_pct=1.0,
            interpolation="bilinear",
            dev_fraction=0.1,
            dev_split="last",
        ),
        augment=AugmentSpec(
            crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), hflip=True, rotation=0.02 * 360, zoom=0.2, fill_mode="reflect"
        ),
        optim=OptimSpec(name="tfa_adamw", lr=1e-3, weight_decay=1e-4, eps=1e-7, grad_clip=None),
        schedule=ScheduleSpec(epochs=100, decay="constant"),
        run=RunSpec(keep_best=True),
    )


def demo() -> TrainConfig:
    """`make demo`: a 4-layer ViT of width 96 (P 4, 16 px) trained from scratch on `digits`.

    scikit-learn's 8x8 handwritten digits, upsampled to 16 px: 16 patches and a class token. AdamW
    lr 2e-3, weight decay 0.05, batch 64, 100 warm-up steps then cosine decay over 1200 steps,
    label smoothing 0.1, a mild random crop (area 80-100%, aspect 0.9-1.1) and no flip (a mirrored
    digit is another glyph). fp32 on one thread: for a model this small, bf16 autocast and more threads
    cost a CPU more than they bring. Reaches: at least 98% val top-1 on the fixed 360-image split with
    seed 0 (tests/training/test_recipe_accuracy.py trains it and holds it there); the last digits move
    with the CPU and its kernels.
    """
    return TrainConfig(
        recipe="demo",
        model=ModelSpec(variant="Ti/4", image_size=16, dim=96, depth=4, num_heads=4, mlp_dim=384),
        data=DataSpec(source="digits", batch_size=64, crop_pct=1.0, interpolation="bilinear"),
        augment=AugmentSpec(crop_scale=(0.8, 1.0), crop_ratio=(0.9, 1.1), hflip=False, label_smoothing=0.1),
        optim=OptimSpec(name="adamw", lr=2e-3, weight_decay=0.05, grad_clip=1.0),
        schedule=ScheduleSpec(steps=1200, warmup_steps=100, decay="cosine"),
        run=RunSpec(eval_every=200, precision="fp32", threads=1),
    )


def finetune() -> TrainConfig:
    """`vitlab finetune`'s default: paper-finetune's method at the checkpoint's own size, on a batch
    and for a length a workstation trains in.

    The checkpoint's image size (no E_pos resampling); Table 4's shortest run, 500 steps (its Pets and
    Flowers rows) with BiT-HyperRule's 100 warm-up steps; batch 128 (small-data's); as every Table 4
    row: SGD with momentum 0.9, lr 0.03 (vit_jax's base_lr), no weight decay, clipping at global norm
    1, cosine decay, the head replaced by a zero-initialised one, vit_jax's inception crop and flip.
    `--recipe paper-finetune[:ROW]` takes the paper's scale: 384 px, batch 512, Table 4's steps.
    """
    config = paper_finetune("pets")
    config.recipe = "finetune"
    config.model.image_size = None
    config.data.batch_size = small_data().data.batch_size
    return config


RECIPES: dict[str, Callable[..., TrainConfig]] = {
    "paper-pretrain": paper_pretrain,
    "paper-finetune": paper_finetune,
    "finetune": finetune,
    "paper-mpp": paper_mpp,
    "small-data": small_data,
    "keras-example": keras_example,
    "demo": demo,
}
# Recipes whose name carries parts after a colon, each a choice of the recipe function:
# paper-pretrain:DATASET[:MODEL], paper-finetune:DATASET[:MODEL], paper-mpp:MODEL.
NAME_PARTS: dict[str, tuple[str, ...]] = {
    "paper-pretrain": ("dataset", "model"),
    "paper-finetune": ("dataset", "model"),
    "paper-mpp": ("model",),
}


def get_recipe(name: str, **choices) -> TrainConfig:
    """The TrainConfig of a recipe name with its optional parts (`paper-finetune:pets`,
    `paper-pretrain:jft:L/16`); `choices` go to the recipe function (model=, epochs=, lr=, steps=)."""
    base, sep, rest = name.partition(":")
    if base not in RECIPES:
        raise ConfigError(f"unknown recipe {name!r}{did_you_mean(base, RECIPES)}; recipes: {', '.join(RECIPES)}")
    names = NAME_PARTS.get(base, ())
    if sep and not names:
        raise ConfigError(f"recipe {base!r} has no dataset rows; use it without ':{rest}'")
    parts = rest.split(":", len(names) - 1) if sep else []
    if not all(parts):
        raise ConfigError(f"recipe name {name!r}: expected {base}:" + ":".join(n.upper() for n in names))
    for part, value in zip(names, parts):
        if choices.get(part, value) != value:
            raise ConfigError(f"recipe {name!r} names {part} {value!r}, but {part} {choices[part]!r} was asked for")
        choices[part] = value
    return RECIPES[base](**choices)
