"""Recipes: the paper's training settings, and two widely used others, as typed code.

Each recipe is a function returning a TrainConfig; its docstring says what it reproduces and what it
should reach. A name may carry a dataset after a colon to pick that dataset's row of the paper's
tables: `paper-pretrain:imagenet21k`, `paper-finetune:pets`.

    vitlab train --recipe small-data --data cifar10:DATA --model Ti/4 --image-size 32 --out runs/c10
    vitlab finetune --recipe paper-finetune:cifar10 --init B16.npz --data cifar10:DATA --out runs/ft
"""

from __future__ import annotations

from collections.abc import Callable

from vitlab.model.config import ConfigError

from .config import AugmentSpec, DataSpec, ModelSpec, OptimSpec, RunSpec, ScheduleSpec, TrainConfig

# Paper Table 3 (pre-training): epochs, base learning rate (ViT-B), decay, weight decay, dropout.
PRETRAIN_TABLE_3: dict[str, dict] = {
    "jft": dict(epochs=7, lr=8e-4, decay="linear", weight_decay=0.1, dropout=0.0),
    "imagenet21k": dict(epochs=90, lr=1e-3, decay="linear", weight_decay=0.03, dropout=0.1),
    "imagenet": dict(epochs=300, lr=3e-3, decay="cosine", weight_decay=0.3, dropout=0.1),
}

# Paper Table 4 (fine-tuning): total steps per dataset; learning rate from the sweep
# {0.001, 0.003, 0.01, 0.03}, 0.03 being vit_jax's default and 0.01 the VTAB setting (Appendix B.1.1).
FINETUNE_TABLE_4: dict[str, dict] = {
    "imagenet": dict(steps=20_000, lr=0.03, ema_decay=0.9999),  # Polyak averaging for ImageNet
    "cifar10": dict(steps=10_000, lr=0.03),
    "cifar100": dict(steps=10_000, lr=0.03),
    "pets": dict(steps=500, lr=0.03),
    "flowers": dict(steps=500, lr=0.03),
    "vtab": dict(steps=2_500, lr=0.01),
}


def paper_pretrain(dataset: str = "jft") -> TrainConfig:
    """Pre-training as in Sec. 4.1 and Table 3 of the paper (default row: JFT-300M).

    Adam (0.9, 0.999) with weight decay 0.1 (the reference code's Adam decays weights decoupled
    from the gradient, scaled by the learning rate: torch's AdamW), batch 4096 reached by gradient
    accumulation, linear warm-up of 10k steps then linear decay, global-norm clipping at 1, dropout
    as Table 3 lists it (0 on JFT, 0.1 on ImageNet-21k and ImageNet). Rows: jft, imagenet21k,
    imagenet. Reaches: ViT-B/16 pre-trained on ImageNet-21k and fine-tuned gives 84.0% on ImageNet
    (Table 5, 384 px); on ImageNet alone (row imagenet, 300 epochs) ViT-B/16 gets about 77.9%.
    """
    row = _row(PRETRAIN_TABLE_3, dataset, "paper-pretrain")
    return TrainConfig(
        recipe=f"paper-pretrain:{dataset}",
        model=ModelSpec(variant="B/16", image_size=224, dropout=row["dropout"]),
        data=DataSpec(batch_size=4096),
        augment=AugmentSpec(crop_scale=(0.05, 1.0), hflip=True),
        optim=OptimSpec(name="adamw", lr=row["lr"], weight_decay=row["weight_decay"], betas=(0.9, 0.999),
                        grad_clip=1.0, grad_accum=32),
        schedule=ScheduleSpec(epochs=row["epochs"], warmup_steps=10_000, decay=row["decay"]),
    )


def paper_finetune(dataset: str = "cifar10") -> TrainConfig:
    """Fine-tuning as in Sec. 3.2, Appendix B.1.1 and Table 4 of the paper (default row: CIFAR-10).

    SGD with momentum 0.9, no weight decay, global-norm clipping at 1, batch 512, cosine decay after
    500 warm-up steps, 384 px (E_pos resampled), the pre-training head replaced by a zero-initialised
    one; Table 4's step count for the dataset; Polyak averaging (0.9999) on ImageNet. Rows: imagenet,
    cifar10, cifar100, pets, flowers, vtab. Reaches: ViT-B/16 (ImageNet-21k) on CIFAR-10 98.59%
    after 500 steps and 99.02% after 10k (vit_jax README); ViT-L/16 (JFT) 99.42% (Table 2).
    """
    row = _row(FINETUNE_TABLE_4, dataset, "paper-finetune")
    return TrainConfig(
        recipe=f"paper-finetune:{dataset}",
        model=ModelSpec(image_size=384, dropout=0.0, attn_dropout=0.0, drop_path=0.0),
        data=DataSpec(batch_size=512),
        augment=AugmentSpec(crop_scale=(0.05, 1.0), hflip=True),  # vit_jax: inception crop + flip
        optim=OptimSpec(name="sgd", lr=row["lr"], momentum=0.9, weight_decay=0.0, grad_clip=1.0,
                        ema_decay=row.get("ema_decay")),
        schedule=ScheduleSpec(steps=row["steps"], warmup_steps=500, decay="cosine"),
    )


def small_data() -> TrainConfig:
    """Training from scratch on small data, AugReg / DeiT style (Steiner et al. 2021; Touvron et al. 2021).

    AdamW (lr 1e-3 for batch 128, weight decay 0.05), 5 warm-up epochs then cosine decay, RandAugment
    (2, 10), Mixup 0.8 and CutMix 1.0, label smoothing 0.1, stochastic depth 0.1, a gentler crop
    (area 35-100%) than ImageNet's because the images are small, 200 epochs. Reaches: a ViT-Ti/4 at
    32 px trained this way on CIFAR-10 is reported at about 91-94% after 100-200 epochs; on a few
    thousand images of a few classes it learns well above chance within minutes on a CPU.
    """
    return TrainConfig(
        recipe="small-data",
        model=ModelSpec(variant="Ti/4", image_size=32, drop_path=0.1, dropout=0.0),
        data=DataSpec(batch_size=128),
        augment=AugmentSpec(crop_scale=(0.35, 1.0), hflip=True, randaugment=(2, 10), mixup=0.8, cutmix=1.0,
                            label_smoothing=0.1),
        optim=OptimSpec(name="adamw", lr=1e-3, weight_decay=0.05, betas=(0.9, 0.999), grad_clip=1.0),
        schedule=ScheduleSpec(epochs=200, warmup_epochs=5, decay="cosine"),
    )


def keras_example() -> TrainConfig:
    """The Keras example "Image classification with Vision Transformer" (keras.io, CIFAR-100).

    Widely copied, and unlike the paper: no class token; all 144 patch outputs are layer-normed,
    flattened and fed through dropout 0.5 and an MLP head of 2048 and 1024 GELU units, each followed
    by dropout 0.5. 72 px, P 6, 8 layers of width 64 with 4 heads of key size 64 and an MLP of
    Dense(128, gelu) -> Dense(64, gelu) (a GELU after both), dropout 0.1; pixels normalised with the
    CIFAR-100 training mean/std, resized, flipped, rotated by up to 0.02 turns (7.2 degrees) and
    zoomed by up to 20% (isotropically here; Keras zooms height and width independently).
    AdamW lr 1e-3, weight decay 1e-4, batch 256, 100 epochs, constant learning rate, no clipping.
    Reaches: about 55% top-1 and 82% top-5 on the CIFAR-100 test set, as the example reports.
    """
    return TrainConfig(
        recipe="keras-example",
        model=ModelSpec(variant="Ti/6", image_size=72, dim=64, depth=8, num_heads=4, head_dim=64, mlp_dim=128,
                        mlp_out_act=True, pool="flatten", pos_embed="learned", head_hidden=(2048, 1024),
                        head_dropout=0.5, dropout=0.1, attn_dropout=0.1, drop_path=0.0),
        data=DataSpec(batch_size=256, mean=(0.5071, 0.4865, 0.4409), std=(0.2673, 0.2564, 0.2762),
                      crop_pct=1.0, interpolation="bilinear"),
        augment=AugmentSpec(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), hflip=True, rotation=7.2, zoom=0.2),
        optim=OptimSpec(name="adamw", lr=1e-3, weight_decay=1e-4, grad_clip=None),
        schedule=ScheduleSpec(epochs=100, decay="constant"),
    )


def demo() -> TrainConfig:
    """`make demo`: a 4-layer ViT of width 96 (P 4, 16 px) trained from scratch on `digits`.

    scikit-learn's 8x8 handwritten digits, upsampled to 16 px: 16 patches and a class token. AdamW
    lr 2e-3, weight decay 0.05, batch 64, 100 warm-up steps then cosine decay over 1200 steps,
    label smoothing 0.1, a mild random crop (area 80-100%, aspect 0.9-1.1; wider ranges cost about a
    point) and no flip (a mirrored digit is another glyph). fp32 on one thread: on CPU, bf16
    autocast runs this small model about 10x slower, and one thread is as fast as two for it while
    not collapsing when other processes share the cores (and gives the same numbers on any machine).
    Reaches: 98.9-99.4% val top-1 on the fixed 360-image split (seeds 0-2); seed 0 gives 99.44% after
    1200 steps, trained in 70 s on 2 CPU cores shared with other work (load about 6).
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
TABLES = {"paper-pretrain": PRETRAIN_TABLE_3, "paper-finetune": FINETUNE_TABLE_4}


def get_recipe(name: str) -> TrainConfig:
    """The TrainConfig of a recipe name, with an optional ':dataset' row (`paper-finetune:pets`)."""
    base, sep, dataset = name.partition(":")
    if base not in RECIPES:
        raise ConfigError(f"unknown recipe {name!r}; recipes: {', '.join(RECIPES)}")
    if not sep:
        return RECIPES[base]()
    if base not in TABLES:
        raise ConfigError(f"recipe {base!r} has no dataset rows; use it without ':{dataset}'")
    return RECIPES[base](dataset)


def _row(table: dict[str, dict], dataset: str, recipe: str) -> dict:
    if dataset not in table:
        raise ConfigError(f"recipe {recipe!r} has no row {dataset!r}; rows: {', '.join(table)}")
    return table[dataset]
