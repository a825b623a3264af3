"""The paper's training tables as data: Table 3 (pre-training) and Table 4 (fine-tuning), with
their captions and the development splits of Appendix B.1.1. The recipes read these and nothing else.

Models are named as vitlab names them: the paper's "ViT-B/16" is "B/16", "R50x1" (BiT) is
"BiT-R50x1", "R50+ViT-B/16" is "R50+B/16". A cell holding two values ("7/14" epochs) is a tuple
whose first value is the recipe's default.
"""

from __future__ import annotations

from dataclasses import dataclass

from .options import Decay

ANY_VIT = "ViT-*"  # Table 3's ImageNet row: every plain ViT


@dataclass(frozen=True)
class PretrainRow:
    models: tuple[str, ...]
    dataset: str
    epochs: tuple[int, ...]  # the first is the default
    lr: float
    decay: Decay
    weight_decay: float
    dropout: float


def _rows(
    models: tuple[str, ...],
    dataset: str,
    epochs: tuple[int, ...],
    lr: float,
    decay: Decay = "linear",
    weight_decay: float = 0.1,
    dropout: float = 0.0,
) -> PretrainRow:
    return PretrainRow(models, dataset, epochs, lr, decay, weight_decay, dropout)


# Table 3: "Hyperparameters for training."
TABLE_3: tuple[PretrainRow, ...] = (
    _rows(("B/16", "B/32"), "jft", (7,), 8e-4),
    _rows(("L/32",), "jft", (7,), 6e-4),
    _rows(("L/16",), "jft", (7, 14), 4e-4),
    _rows(("H/14",), "jft", (14,), 3e-4),
    _rows(("BiT-R50x1", "BiT-R50x2"), "jft", (7,), 1e-3),
    _rows(("BiT-R101x1",), "jft", (7,), 8e-4),
    _rows(("BiT-R152x1", "BiT-R152x2"), "jft", (7,), 6e-4),
    _rows(("R50+B/16", "R50+B/32"), "jft", (7,), 8e-4),
    _rows(("R50+L/32",), "jft", (7,), 2e-4),
    _rows(("R50+L/16",), "jft", (7, 14), 4e-4),
    _rows(("B/16", "B/32"), "imagenet21k", (90,), 1e-3, weight_decay=0.03, dropout=0.1),
    _rows(("L/16", "L/32"), "imagenet21k", (30, 90), 1e-3, weight_decay=0.03, dropout=0.1),
    _rows((ANY_VIT,), "imagenet", (300,), 3e-3, decay="cosine", weight_decay=0.3, dropout=0.1),
)

# Table 3's caption: "All models are trained with a batch size of 4096 and learning rate warmup of
# 10k steps. For ImageNet we found it beneficial to additionally apply gradient clipping at global
# norm 1. Training resolution is 224."
TABLE_3_BATCH_SIZE = 4096
TABLE_3_WARMUP_STEPS = 10_000
TABLE_3_GRAD_CLIP = {"imagenet": 1.0}  # the other datasets: none
TABLE_3_IMAGE_SIZE = 224
# Sec. 4.1: "We train all models, including ResNets, using Adam ... and apply a high weight decay of
# 0.1"; Table 3's JFT rows.
TABLE_3_JFT_WEIGHT_DECAY = 0.1


@dataclass(frozen=True)
class FinetuneRow:
    steps: int
    lrs: tuple[float, ...]  # Table 4's base-LR grid


# Table 4: "Hyperparameters for fine-tuning."
TABLE_4: dict[str, FinetuneRow] = {
    "imagenet": FinetuneRow(20_000, (0.003, 0.01, 0.03, 0.06)),
    "cifar100": FinetuneRow(10_000, (0.001, 0.003, 0.01, 0.03)),
    "cifar10": FinetuneRow(10_000, (0.001, 0.003, 0.01, 0.03)),
    "pets": FinetuneRow(500, (0.001, 0.003, 0.01, 0.03)),
    "flowers": FinetuneRow(500, (0.001, 0.003, 0.01, 0.03)),
    "vtab": FinetuneRow(2_500, (0.01,)),
}

# Table 4's caption: "All models are fine-tuned with cosine learning rate decay, a batch size of 512,
# no weight decay, and grad clipping at global norm 1. If not mentioned otherwise, fine-tuning
# resolution is 384."
TABLE_4_DECAY: Decay = "cosine"
TABLE_4_BATCH_SIZE = 512
TABLE_4_WEIGHT_DECAY = 0.0
TABLE_4_GRAD_CLIP = 1.0
TABLE_4_IMAGE_SIZE = 384

# Sec. 4.1: "For ImageNet results in Table 2, we fine-tuned at higher resolution: 512 for ViT-L/16 and
# 518 for ViT-H/14, and also used Polyak & Juditsky (1992) averaging with a factor of 0.9999". Table 5's
# caption: its ImageNet results (384 px) "are computed without additional techniques (Polyak averaging
# and 512 resolution images) used to achieve results in Table 2".
TABLE_2_IMAGENET_SIZES = {"L/16": 512, "H/14": 518}
TABLE_2_POLYAK = 0.9999

# Appendix B.1.2: "We trained our self-supervised model for 1M steps (ca. 14 epochs) with batch size
# 4096 on JFT. We use Adam, with a base learning rate of 2e-4, warmup of 10k steps and cosine learning
# rate decay."
MPP_STEPS = 1_000_000
MPP_BATCH_SIZE = 4096
MPP_LR = 2e-4
MPP_WARMUP_STEPS = 10_000
MPP_DECAY: Decay = "cosine"

# Appendix B.1.1: the learning rate is picked on "small sub-splits from the training set (10% for
# Pets and Flowers, 2% for CIFAR, 1% ImageNet) as development set", training on the rest; the final
# run trains on the whole training set and is evaluated on the test set. VTAB has one learning rate.
DEV_FRACTIONS: dict[str, float] = {"imagenet": 0.01, "cifar10": 0.02, "cifar100": 0.02, "pets": 0.1, "flowers": 0.1}


def pretrain_row(model: str, dataset: str) -> PretrainRow | None:
    """Table 3's row for `model` pre-trained on `dataset`, or None when the table has none."""
    from vitlab.model.bit import is_bit_name
    from vitlab.model.hybrid import is_hybrid_name

    for row in TABLE_3:
        if row.dataset != dataset:
            continue
        if model in row.models:
            return row
        if ANY_VIT in row.models and not (is_hybrid_name(model) or is_bit_name(model)):
            return row
    return None


def pretrain_datasets() -> tuple[str, ...]:
    return tuple(dict.fromkeys(row.dataset for row in TABLE_3))
