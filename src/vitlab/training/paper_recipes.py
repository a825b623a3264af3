"""The paper's recipes: pre-training (Sec. 4.1, Table 3), fine-tuning (Sec. 3.2, B.1.1, Table 4) and
masked patch pre-training (Sec. 4.6, B.1.2), their values read from vitlab.training.paper_tables and
the quoted runs' from vitlab.training.quoted_runs.
"""

from __future__ import annotations

import logging

from vitlab.model import ViTConfig, config_for
from vitlab.model.config import ConfigError
from vitlab.suggestions import did_you_mean

from . import paper_tables as tables
from .config import AugmentSpec, DataSpec, ModelSpec, ObjectiveSpec, OptimSpec, ScheduleSpec, TrainConfig
from .quoted_runs import VIT_JAX_MODEL_LRS, quoted_warmup

log = logging.getLogger("vitlab")


def paper_pretrain(dataset: str = "jft", model: str = "B/16", epochs: int | None = None) -> TrainConfig:
    """Pre-training as in Sec. 4.1 and Table 3 of the paper: the row of `model` on `dataset`.

    Names: `paper-pretrain[:DATASET[:MODEL]]`, DATASET one of jft (default), imagenet21k, imagenet;
    MODEL any model with a Table 3 row on it (default B/16; on imagenet any ViT). Per row: epochs, base
    learning rate, linear or cosine decay, weight decay and dropout as Table 3 lists them. A ViT (and a
    hybrid) pre-trains with the paper's head, "a MLP with one hidden layer at pre-training time" (Sec.
    3.1; tanh, D.3) of width D, as the `pre_logits` layer of the 2020 ImageNet-21k checkpoints:
    `representation_size` = D; fine-tuning replaces it (Sec. 3.2, B.1.1) and few-shot evaluation reads
    its output. For all, batch 4096 (reached by gradient accumulation), 10k linear warm-up steps and
    gradient clipping at global norm 1 on ImageNet only (the caption); Adam (0.9, 0.999) with weight
    decay decoupled from the gradient and scaled by the learning rate, as the reference code's (torch's
    AdamW). Where the table gives two epoch counts (L/16 on JFT 7/14, L/{16,32} on ImageNet-21k 30/90) the first
    is the default and `epochs` picks the other. Reaches: ViT-B/16 pre-trained on ImageNet-21k and
    fine-tuned gives 84.0% on ImageNet (Table 5, 384 px); on ImageNet alone ViT-B/16 gets about 77.9%.
    """
    row = tables.pretrain_row(model, dataset)
    if row is None:
        known = ", ".join(tables.pretrain_datasets())
        raise ConfigError(
            f"recipe 'paper-pretrain': Table 3 has no row for {model!r} on {dataset!r} "
            f"(datasets {known}; see vitlab.training.paper_tables.TABLE_3)"
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
        model=ModelSpec(
            variant=model,
            image_size=tables.TABLE_3_IMAGE_SIZE,
            dropout=None if is_bit else row.dropout,
            representation_size=None if is_bit else pretraining_head_width(model),
        ),
        data=DataSpec(batch_size=tables.TABLE_3_BATCH_SIZE),
        augment=AugmentSpec(crop_scale=(0.05, 1.0), hflip=True),
        optim=pretraining_optimizer(row.lr, row.weight_decay, dataset),
        schedule=ScheduleSpec(epochs=epochs, warmup_steps=tables.TABLE_3_WARMUP_STEPS, decay=row.decay),
    )


def pretraining_optimizer(lr: float, weight_decay: float, dataset: str) -> OptimSpec:
    """Sec. 4.1's pre-training optimiser: Adam (0.9, 0.999), its weight decay decoupled from the gradient
    and scaled by the learning rate as the reference code's (torch's AdamW), the batch of 4096 in 32
    accumulated micro-batches, gradient clipping at global norm 1 on ImageNet only (Table 3's caption)."""
    return OptimSpec(
        name="adamw",
        lr=lr,
        weight_decay=weight_decay,
        betas=(0.9, 0.999),
        grad_clip=tables.TABLE_3_GRAD_CLIP.get(dataset),
        grad_accum=32,
    )


def pretraining_head_width(model: str) -> int:
    """D of `model`, a ViT or a hybrid ("R50+L/16": its ViT's): the width of its pre-training head's
    hidden layer (Sec. 3.1, D.3)."""
    architecture = config_for(model.rpartition("+")[2])
    assert isinstance(architecture, ViTConfig), model
    return architecture.dim


# Warm-up before the cosine decay: Table 4 gives none. Runs of 2,500 steps and more take vit_jax's
# 500 (vit_jax/configs/common.py, warmup_steps); the 500-step runs (Pets, Flowers) take BiT-HyperRule's
# 100 for its 500-step schedule (Kolesnikov et al. 2020, big_transfer/bit_hyperrule.py), so that the
# schedule reaches its decay. Another length takes a quoted run's warm-up, else the same share of it.
FINETUNE_WARMUP_STEPS = {500: 100}
VIT_JAX_WARMUP_STEPS = 500
VIT_JAX_BASE_LR = 0.03  # vit_jax/configs/common.py, base_lr; in every Table 4 grid but VTAB's


def paper_finetune(
    dataset: str = "cifar10", model: str | None = None, lr: float | None = None, steps: int | None = None
) -> TrainConfig:
    """Fine-tuning as in Sec. 3.2, Appendix B.1.1 and Table 4 of the paper (default row: CIFAR-10).

    Names: `paper-finetune[:DATASET[:MODEL]]`. Per row, Table 4's step count and base-LR grid: imagenet
    20k steps {0.003, 0.01, 0.03, 0.06}; cifar10, cifar100 10k, pets, flowers 500, each {0.001, 0.003,
    0.01, 0.03}; vtab 2.5k at 0.01. `lr` picks a grid value (default vit_jax's base_lr 0.03, VTAB's
    0.01); `vitlab experiment lr-sweep` picks it on a development split as Appendix B.1.1 does. For all
    (the caption): SGD with momentum 0.9, cosine decay, batch 512, no weight decay, gradient clipping at
    global norm 1, 384 px (E_pos resampled), the pre-training head replaced by a zero-initialised one.
    MODEL, the model fine-tuned, takes what a source gives that model alone: on imagenet, L/16 and H/14
    Table 2's setting (Sec. 4.1: 512 and 518 px, Polyak averaging 0.9999; Table 5's 384 px numbers, the
    row without MODEL, have neither); on cifar10, B/16 vit_jax's lr 0.01 (configs/vit.py). Warm-up (not
    in the table): 500 steps as vit_jax, 100 for the 500-step Pets and Flowers runs as BiT-HyperRule;
    a run of another length (`steps`, --steps) takes a quoted run's warm-up at that length, else the
    row's share of it, as vit_jax's shorter runs scale theirs. Reaches, ViT-B/16 pre-trained on
    ImageNet-21k (vit_jax README): `paper-finetune:cifar10:B/16` 99.02% on CIFAR-10;
    `paper-finetune:cifar10 --steps 500 --set model.dropout=0.1` 98.59% (lr 0.03, warm-up 50). Every
    quoted number, with its settings and source: vitlab.training.quoted_runs.QUOTED_RUNS.
    """
    if dataset not in tables.TABLE_4:
        raise ConfigError(
            f"recipe 'paper-finetune' has no row {dataset!r}{did_you_mean(dataset, tables.TABLE_4)}; "
            f"rows: {', '.join(tables.TABLE_4)}"
        )
    row = tables.TABLE_4[dataset]
    name = f"paper-finetune:{dataset}" + (f":{model}" if model else "")
    image_size, averaging = _finetune_model_settings(dataset, model)
    if lr is None:
        default = VIT_JAX_BASE_LR if VIT_JAX_BASE_LR in row.lrs else row.lrs[0]
        lr = VIT_JAX_MODEL_LRS.get((model or "", dataset), default)
    elif lr not in row.lrs:
        raise ConfigError(
            f"recipe '{name}': lr {lr:g} is not in Table 4's grid {{{', '.join(f'{v:g}' for v in row.lrs)}}}"
        )
    warmup = FINETUNE_WARMUP_STEPS.get(row.steps, VIT_JAX_WARMUP_STEPS)
    if steps is not None and steps != row.steps:
        warmup = warmup_at_length(dataset, steps, row.steps, warmup)
    return TrainConfig(
        recipe=name,
        model=ModelSpec(image_size=image_size, dropout=0.0, attn_dropout=0.0, drop_path=0.0),
        data=DataSpec(batch_size=tables.TABLE_4_BATCH_SIZE),
        augment=AugmentSpec(crop_scale=(0.05, 1.0), hflip=True),  # vit_jax: inception crop + flip
        optim=OptimSpec(
            name="sgd",
            lr=lr,
            momentum=0.9,
            weight_decay=tables.TABLE_4_WEIGHT_DECAY,
            grad_clip=tables.TABLE_4_GRAD_CLIP,
            ema_decay=averaging,
        ),
        schedule=ScheduleSpec(steps=steps or row.steps, warmup_steps=warmup, decay=tables.TABLE_4_DECAY),
    )


def _finetune_model_settings(dataset: str, model: str | None) -> tuple[int, float | None]:
    """(image size, Polyak decay or None) for fine-tuning `model` on `dataset`; a ConfigError for a
    model that no source gives settings of its own on that row."""
    if model is None:
        return tables.TABLE_4_IMAGE_SIZE, None
    if dataset == "imagenet" and model in tables.TABLE_2_IMAGENET_SIZES:
        return tables.TABLE_2_IMAGENET_SIZES[model], tables.TABLE_2_POLYAK
    if (model, dataset) in VIT_JAX_MODEL_LRS:
        return tables.TABLE_4_IMAGE_SIZE, None
    named = [f"imagenet:{m}" for m in tables.TABLE_2_IMAGENET_SIZES] + [f"{d}:{m}" for m, d in VIT_JAX_MODEL_LRS]
    raise ConfigError(
        f"recipe 'paper-finetune:{dataset}:{model}': no source gives {model} settings of its own on {dataset} "
        f"(paper-finetune:{', paper-finetune:'.join(named)} have them); use 'paper-finetune:{dataset}'"
    )


def warmup_at_length(row: str, steps: int, row_steps: int, row_warmup: int) -> int:
    """The warm-up of a `steps`-step run of a recipe that warms up for `row_warmup` of its `row_steps`:
    a quoted run's at that length on paper-finetune's `row` ('' for none), else the same share."""
    quoted = quoted_warmup(row, steps)
    return quoted if quoted is not None else max(1, round(row_warmup * steps / row_steps))


def finetune_lr_grid(dataset: str) -> tuple[float, ...]:
    """Table 4's base-LR grid for `dataset`."""
    paper_finetune(dataset)  # refuses an unknown row
    return tables.TABLE_4[dataset].lrs


def _check_vit_name(model: str, recipe: str = "paper-pretrain") -> None:
    from vitlab.model.variants import parse_variant

    try:
        parse_variant(model)
    except (ConfigError, ValueError):
        what = "Table 3's ImageNet row is" if recipe == "paper-pretrain" else "masked patch prediction is"
        raise ConfigError(f"recipe {recipe!r}: {what} for ViTs (ViT-*), not {model!r}") from None


def paper_mpp(model: str = "B/16") -> TrainConfig:
    """Masked patch pre-training as in Sec. 4.6 and Appendix B.1.2 of the paper (`paper-mpp[:MODEL]`).

    B.1.2: "We trained our self-supervised model for 1M steps (ca. 14 epochs) with batch size 4096 on
    JFT. We use Adam, with a base learning rate of 2e-4, warmup of 10k steps and cosine learning rate
    decay", predicting the 3-bit mean colour of every corrupted patch (vitlab.training.masked_patch).
    Where B.1.2 is silent, the paper's other pre-training on JFT (Sec. 4.1, Table 3): weight decay 0.1
    ("we train all models ... apply a high weight decay of 0.1"), decoupled as paper-pretrain's, no
    dropout, no gradient clipping, 224 px (B.1: "all training is done on resolution 224"); the crop and
    flip are paper-pretrain's. Default model ViT-B/16, the paper's. Reaches (Sec. 4.6): ViT-B/16 so
    pre-trained on JFT and fine-tuned on ImageNet, 79.9% top-1.
    """
    _check_vit_name(model, "paper-mpp")
    return TrainConfig(
        recipe=f"paper-mpp:{model}",
        model=ModelSpec(variant=model, image_size=tables.TABLE_3_IMAGE_SIZE, dropout=0.0),
        data=DataSpec(batch_size=tables.MPP_BATCH_SIZE),
        augment=AugmentSpec(crop_scale=(0.05, 1.0), hflip=True),
        optim=pretraining_optimizer(tables.MPP_LR, tables.TABLE_3_JFT_WEIGHT_DECAY, "jft"),
        schedule=ScheduleSpec(steps=tables.MPP_STEPS, warmup_steps=tables.MPP_WARMUP_STEPS, decay=tables.MPP_DECAY),
        objective=ObjectiveSpec(name="mpp", mpp_target="mean-color"),
    )
