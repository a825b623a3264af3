"""Recipes: the paper's training settings, and two widely used others, as typed code.

Each recipe is a function returning a TrainConfig; its docstring says what it reproduces and what it
should reach. A name may carry a dataset after a colon to pick that dataset's row of the paper's
tables (vitlab.train.paper_tables): `paper-pretrain:imagenet21k:L/16`, `paper-finetune:pets`.

    vitlab train --recipe small-data --data cifar10:DATA --model Ti/4 --image-size 32 --out runs/c10
    vitlab finetune --recipe paper-finetune:cifar10 --ckpt B16.npz --data cifar10:DATA --out runs/ft
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from vitlab.model.config import ConfigError

from . import paper_tables as tables
from .config import AugmentSpec, DataSpec, ModelSpec, OptimSpec, RunSpec, ScheduleSpec, TrainConfig

log = logging.getLogger("vitlab")


def paper_pretrain(dataset: str = "jft", model: str = "B/16", epochs: int | None = None) -> TrainConfig:
    """Pre-training as in Sec. 4.1 and Table 3 of the paper: the row of `model` on `dataset`.

    Names: `paper-pretrain[:DATASET[:MODEL]]`, DATASET one of jft (default), imagenet21k, imagenet;
    MODEL any model with a Table 3 row on it (default B/16; on imagenet any ViT). Per row: epochs, base
    learning rate, linear or cosine decay, weight decay and dropout as Table 3 lists them; for all,
    batch 4096 (reached by gradient accumulation) and 10k linear warm-up steps, and gradient clipping
    at global norm 1 on ImageNet only (the caption). Adam (0.9, 0.999) with weight decay decoupled
    from the gradient and scaled by the learning rate, as the reference code's (torch's AdamW). Where
    the table gives two epoch counts (L/16 on JFT 7/14, L/{16,32} on ImageNet-21k 30/90) the first
    is the default and `epochs` picks the other. Reaches: ViT-B/16 pre-trained on ImageNet-21k and
    fine-tuned gives 84.0% on ImageNet (Table 5, 384 px); on ImageNet alone ViT-B/16 gets about 77.9%.
    """
    row = tables.pretrain_row(model, dataset)
    if row is None:
        known = ", ".join(tables.pretrain_datasets())
        raise ConfigError(
            f"recipe 'paper-pretrain': Table 3 has no row for {model!r} on {dataset!r} "
            f"(datasets {known}; see vitlab.train.paper_tables.TABLE_3)"
        )
    if tables.ANY_VIT in row.models:
        _check_vit_name(model)
    if epochs is None:
        epochs = row.epochs[0]
    elif epochs not in row.epochs:
        raise ConfigError(
            f"recipe 'paper-pretrain': Table 3 gives {model} on {dataset} "
            f"{'/'.join(map(str, row.epochs))} epochs, not {epochs}"
        )
    if len(row.epochs) > 1:
        log.info(
            "Table 3 lists %s epochs for %s on %s; using %d", "/".join(map(str, row.epochs)), model, dataset, epochs
        )
    is_bit = model.startswith("BiT-")
    return TrainConfig(
        recipe=f"paper-pretrain:{dataset}:{model}",
        # Dropout (Appendix B.1) is a ViT's; the BiT ResNets have none (Table 3 gives them 0.0).
        model=ModelSpec(variant=model, image_size=tables.TABLE_3_IMAGE_SIZE, dropout=None if is_bit else row.dropout),
        data=DataSpec(batch_size=tables.TABLE_3_BATCH_SIZE),
        augment=AugmentSpec(crop_scale=(0.05, 1.0), hflip=True),
        optim=OptimSpec(
            name="adamw",
            lr=row.lr,
            weight_decay=row.weight_decay,
            betas=(0.9, 0.999),
            grad_clip=tables.TABLE_3_GRAD_CLIP.get(dataset),
            grad_accum=32,
        ),
        schedule=ScheduleSpec(epochs=epochs, warmup_steps=tables.TABLE_3_WARMUP_STEPS, decay=row.decay),
    )


# Warm-up before the cosine decay: Table 4 gives none. Runs of 2,500 steps and more take vit_jax's
# 500 (vit_jax/configs/common.py, warmup_steps); the 500-step runs (Pets, Flowers) take BiT-HyperRule's
# 100 for its 500-step schedule (Kolesnikov et al. 2020, big_transfer/bit_hyperrule.py), so that the
# schedule reaches its decay.
FINETUNE_WARMUP_STEPS = {500: 100}
VIT_JAX_WARMUP_STEPS = 500
VIT_JAX_BASE_LR = 0.03  # vit_jax/configs/common.py, base_lr; in every Table 4 grid but VTAB's


def paper_finetune(dataset: str = "cifar10", lr: float | None = None) -> TrainConfig:
    """Fine-tuning as in Sec. 3.2, Appendix B.1.1 and Table 4 of the paper (default row: CIFAR-10).

    Per row, Table 4's step count and base-LR grid: imagenet 20k steps {0.003, 0.01, 0.03, 0.06};
    cifar10, cifar100 10k, pets, flowers 500, each {0.001, 0.003, 0.01, 0.03}; vtab 2.5k at 0.01.
    `lr` picks a grid value (default 0.03, vit_jax's base_lr; VTAB's 0.01); `vitlab experiment
    lr-sweep` picks it on a development split as Appendix B.1.1 does. For all (the caption): SGD with
    momentum 0.9, cosine decay, batch 512, no weight decay, gradient clipping at global norm 1, 384 px
    (E_pos resampled), the pre-training head replaced by a zero-initialised one; Polyak averaging
    (0.9999) on ImageNet. Warm-up (not in the table): 500 steps as vit_jax, 100 for the 500-step
    Pets and Flowers runs as BiT-HyperRule, so that every schedule decays. Reaches: ViT-B/16
    (ImageNet-21k) on CIFAR-10 98.59% after 500 steps and 99.02% after 10k (vit_jax README); ViT-L/16
    (JFT) 99.42% (Table 2).
    """
    if dataset not in tables.TABLE_4:
        raise ConfigError(f"recipe 'paper-finetune' has no row {dataset!r}; rows: {', '.join(tables.TABLE_4)}")
    row = tables.TABLE_4[dataset]
    if lr is None:
        lr = VIT_JAX_BASE_LR if VIT_JAX_BASE_LR in row.lrs else row.lrs[0]
    elif lr not in row.lrs:
        raise ConfigError(
            f"recipe 'paper-finetune:{dataset}': lr {lr:g} is not in Table 4's grid "
            f"{{{', '.join(f'{v:g}' for v in row.lrs)}}}"
        )
    return TrainConfig(
        recipe=f"paper-finetune:{dataset}",
        model=ModelSpec(image_size=tables.TABLE_4_IMAGE_SIZE, dropout=0.0, attn_dropout=0.0, drop_path=0.0),
        data=DataSpec(batch_size=tables.TABLE_4_BATCH_SIZE),
        augment=AugmentSpec(crop_scale=(0.05, 1.0), hflip=True),  # vit_jax: inception crop + flip
        optim=OptimSpec(
            name="sgd",
            lr=lr,
            momentum=0.9,
            weight_decay=tables.TABLE_4_WEIGHT_DECAY,
            grad_clip=tables.TABLE_4_GRAD_CLIP,
            ema_decay=0.9999 if dataset == "imagenet" else None,
        ),
        schedule=ScheduleSpec(
            steps=row.steps,
            warmup_steps=FINETUNE_WARMUP_STEPS.get(row.steps, VIT_JAX_WARMUP_STEPS),
            decay=tables.TABLE_4_DECAY,
        ),
    )


def finetune_lr_grid(dataset: str) -> tuple[float, ...]:
    """Table 4's base-LR grid for `dataset`."""
    paper_finetune(dataset)  # refuses an unknown row
    return tables.TABLE_4[dataset].lrs


def _check_vit_name(model: str) -> None:
    from vitlab.model.variants import parse_variant

    try:
        parse_variant(model)
    except (ConfigError, ValueError):
        raise ConfigError(
            f"recipe 'paper-pretrain': Table 3's ImageNet row is for ViTs (ViT-*), not {model!r}"
        ) from None


def small_data() -> TrainConfig:
    """Training from scratch on small data, AugReg / DeiT style (Steiner et al. 2021; Touvron et al. 2021).

    AdamW (lr 1e-3 for batch 128, weight decay 0.05), 5 warm-up epochs then cosine decay, RandAugment
    (2, 10) as timm's `rand-m10-n2` defines it (two of its 15 operations per image, each with
    probability 0.5 at full strength: rotation up to 30 degrees, shear 0.3, translation 45%;
    vitlab.data.randaugment), Mixup 0.8 and CutMix 1.0, label smoothing 0.1, stochastic depth 0.1, a gentler crop
    (area 35-100%) than ImageNet's because the images are small, 200 epochs. Reaches: a ViT-Ti/4 at
    32 px trained this way on CIFAR-10 is reported at about 91-94% after 100-200 epochs; on a few
    thousand images of a few classes it learns well above chance within minutes on a CPU.
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
        model=ModelSpec(
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
        ),
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
    label smoothing 0.1, a mild random crop (area 80-100%, aspect 0.9-1.1; wider ranges cost about a
    point) and no flip (a mirrored digit is another glyph). fp32 on one thread: on CPU, bf16
    autocast runs this small model slower, and one thread is as fast as two for it while
    not collapsing when other processes share the cores (and gives the same numbers on any machine).
    Reaches: 98.9-99.4% val top-1 on the fixed 360-image split (seeds 0-2); seed 0 gives 99.44% after
    1200 steps.
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


RECIPES: dict[str, Callable[..., TrainConfig]] = {
    "paper-pretrain": paper_pretrain,
    "paper-finetune": paper_finetune,
    "small-data": small_data,
    "keras-example": keras_example,
    "demo": demo,
}
# Recipes whose name carries parts after a colon: paper-pretrain:DATASET[:MODEL], paper-finetune:DATASET.
NAME_PARTS = {"paper-pretrain": 2, "paper-finetune": 1}


def get_recipe(name: str, **choices) -> TrainConfig:
    """The TrainConfig of a recipe name with its optional parts (`paper-finetune:pets`,
    `paper-pretrain:jft:L/16`); `choices` go to the recipe function (model=, epochs=, lr=)."""
    base, sep, rest = name.partition(":")
    if base not in RECIPES:
        raise ConfigError(f"unknown recipe {name!r}; recipes: {', '.join(RECIPES)}")
    parts = rest.split(":", NAME_PARTS.get(base, 0) - 1) if sep else []
    if sep and base not in NAME_PARTS:
        raise ConfigError(f"recipe {base!r} has no dataset rows; use it without ':{rest}'")
    if len(parts) > NAME_PARTS.get(base, 0) or not all(parts):
        raise ConfigError(
            f"recipe name {name!r}: expected {base}:DATASET" + (":MODEL" if base == "paper-pretrain" else "")
        )
    if base == "paper-pretrain" and len(parts) == 2:
        if choices.get("model", parts[1]) != parts[1]:
            raise ConfigError(f"recipe {name!r} names model {parts[1]!r}, but model {choices['model']!r} was asked for")
        choices["model"] = parts[1]
    return RECIPES[base](*parts[:1], **choices)
