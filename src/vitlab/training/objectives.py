"""Objectives: what a training step's loss asks of the model, and what an evaluation measures.

The Trainer calls its objective (config.objective.name) for every micro-batch's loss and for every
evaluation row; the objective owns any parameters it adds to the model.

- `classify` (Classification): cross-entropy on the labels, with mixup / cutmix and label smoothing;
  evaluated as val_top1, val_top5 and val_loss of the class predictions.
- `mpp` (MaskedPatchPrediction, masked_patch.py): self-supervised, the labels are never read. Its
  [mask] embedding and target head ride on the model as the submodule `mpp_head`, so that the
  optimiser, gradient clipping, weight averaging and checkpoints (which resume it) carry them; the
  model folder written at the end holds the ViT alone (`saved_model` drops the head), ready for
  `vitlab finetune --ckpt DIR`, which attaches a new classifier head. Its evaluation row uses the same
  columns for the masked-patch target: val_top1 / val_top5 the share of target predictions right
  (top-5: none for `l2`), val_loss the mpp loss, over the corrupted patches of the validation images
  under one fixed corruption (seed 0), so that evaluations compare.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar, cast

import torch
import torch.nn.functional as F
from torch import nn

from vitlab.data.transforms import batch_mixing
from vitlab.evaluate import describe_top5, evaluate
from vitlab.evaluate.metrics import Combine
from vitlab.model import ConfigError, VisionTransformer

from .config import TrainConfig
from .masked_patch import (
    CELLS,
    UNTOUCHED,
    ColourClasses,
    MaskedPatchHead,
    PatchRegression,
    TargetHead,
    corrupt_patches,
    downsized_target,
    mean_colour_target,
)

Autocast = Callable[[], contextlib.AbstractContextManager]
Network = Callable[..., torch.Tensor]  # the model as trained: maybe wrapped (DDP) or compiled
SavedModel = TypeVar("SavedModel", bound=nn.Module)
Batches = Iterable[tuple[torch.Tensor, torch.Tensor]]
HEAD = "mpp_head"
EVAL_SEED = 0


class Objective(Protocol):
    def loss(self, network: Network, images: torch.Tensor, labels: torch.Tensor, autocast: Autocast) -> torch.Tensor:
        """The loss of one micro-batch (already on the device), from `network` (the model as trained)."""
        ...

    def evaluate(
        self,
        model: nn.Module,
        loader: Batches,
        device: torch.device,
        autocast: Autocast,
        combine: Combine | None = None,
    ) -> tuple[dict[str, Any], int]:
        """The evaluation row's numbers (val_top1, val_top5: None where not measured, val_loss) and
        the number of images; `combine` adds up the sums of processes that each scored a share."""
        ...

    def describe(self, numbers: dict[str, Any], split: str = "val") -> str:
        """One line of an evaluation row or summary (its val_* numbers) for the log, named `split`."""
        ...

    def saved_model(self, model: SavedModel) -> SavedModel:
        """The model the run's folder holds (the objective's own parameters dropped)."""
        ...


class Classification:
    """Cross-entropy on the labels (mixed one-hots with mixup / cutmix), label smoothing."""

    def __init__(self, config: TrainConfig, num_classes: int) -> None:
        self.smoothing = config.augment.label_smoothing
        self.mixing = batch_mixing(config.augment.mixup, config.augment.cutmix, num_classes)
        self.num_classes = num_classes

    def loss(self, network: Network, images: torch.Tensor, labels: torch.Tensor, autocast: Autocast) -> torch.Tensor:
        if self.mixing is not None:
            images, labels = self.mixing(images, labels)  # labels become (B, K) mixed one-hots
        with autocast():
            logits = network(images)
        return F.cross_entropy(logits.float(), labels, label_smoothing=self.smoothing)

    def evaluate(
        self,
        model: nn.Module,
        loader: Batches,
        device: torch.device,
        autocast: Autocast,
        combine: Combine | None = None,
    ) -> tuple[dict[str, Any], int]:
        result = evaluate(model, loader, device=device, autocast=autocast, combine=combine)
        return dict(val_top1=result.top1, val_top5=result.top5, val_loss=result.loss), result.count

    def describe(self, numbers: dict[str, Any], split: str = "val") -> str:
        top5 = describe_top5(numbers["val_top5"], self.num_classes)
        return f"{split} top-1 {numbers['val_top1']:.4f}  {top5}"

    def saved_model(self, model: SavedModel) -> SavedModel:
        return model


class MaskedPatchPrediction:
    """Masked patch prediction (paper Sec. 4.6, Appendix B.1.2; masked_patch.py): attaches its head to
    `model` (a ViT with a plain patch embedding) as `mpp_head`."""

    def __init__(self, config: TrainConfig, model: nn.Module) -> None:
        self.target_name = config.objective.mpp_target
        self.model = check_model(model, self.target_name)
        vit = self.model.config
        self.patch = vit.patch_size
        mean, std = (torch.tensor(values) for values in (vit.preprocessing.mean, vit.preprocessing.std))
        self.mean, self.std = mean.view(1, 3, 1, 1), std.view(1, 3, 1, 1)
        target: TargetHead
        if self.target_name == "mean-color":
            target = ColourClasses(vit.dim, 1, mean_colour_target)
        elif self.target_name == "4x4":
            target = ColourClasses(vit.dim, CELLS * CELLS, downsized_target)
        else:
            target = PatchRegression(vit.dim, self.patch, vit.in_channels, mean, std)
        self.model.add_module(HEAD, MaskedPatchHead(vit.dim, target))

    def _loss_and_hits(
        self, model: nn.Module, images: torch.Tensor, autocast: Autocast, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        vit = cast(VisionTransformer, model)  # the training model, or its average (a copy)
        head = cast(MaskedPatchHead, model.get_submodule(HEAD))  # attached in __init__
        kinds: list[torch.Tensor] = []

        def corrupt(_module: nn.Module, _inputs: Any, output: tuple[torch.Tensor, tuple[int, int]]) -> Any:
            tokens, kind = corrupt_patches(output[0], head.mask_embedding, generator)
            kinds.append(kind)
            return tokens, output[1]

        # Before the class token and E_pos are added: the output of the patch embedding (Eq. 1).
        hook = vit.patch_embed.register_forward_hook(corrupt)
        try:
            with autocast():
                tokens, _ = vit.encode(images)
        finally:
            hook.remove()
        corrupted = kinds[0] != UNTOUCHED  # (B, N)
        patch_tokens = tokens[:, vit.config.num_prefix_tokens :].float()
        pixels = images * self.std.to(images) + self.mean.to(images)
        target = head.target.target(images, pixels, self.patch)
        return head.target.loss_and_hits(patch_tokens[corrupted], target[corrupted])

    def loss(self, network: Network, images: torch.Tensor, labels: torch.Tensor, autocast: Autocast) -> torch.Tensor:
        return self._loss_and_hits(self.model, images, autocast)[0]  # the labels are not read

    @torch.no_grad()
    def evaluate(
        self,
        model: nn.Module,
        loader: Batches,
        device: torch.device,
        autocast: Autocast,
        combine: Combine | None = None,
    ) -> tuple[dict[str, Any], int]:
        generator = torch.Generator().manual_seed(EVAL_SEED)
        was_training = model.training
        model.eval()
        loss_sum, hits, predictions, count = 0.0, 0.0, 0, 0
        try:
            for images, _ in loader:
                loss, batch_hits = self._loss_and_hits(model, images.to(device), autocast, generator)
                loss_sum += float(loss) * batch_hits.numel()
                hits, predictions = hits + float(batch_hits.sum()), predictions + batch_hits.numel()
                count += images.shape[0]
        finally:
            model.train(was_training)
        if combine is not None:
            loss_sum, hits, total, seen = combine([loss_sum, hits, predictions, count])
            predictions, count = int(total), int(seen)
        if not predictions:
            raise ConfigError("objective.name=mpp: the validation split holds no images")
        return dict(val_top1=hits / predictions, val_top5=None, val_loss=loss_sum / predictions), count

    def describe(self, numbers: dict[str, Any], split: str = "val") -> str:
        return f"masked patch prediction ({self.target_name}): {split} accuracy {numbers['val_top1']:.4f}"

    def saved_model(self, model: SavedModel) -> SavedModel:
        if hasattr(model, HEAD):
            delattr(model, HEAD)
        return model


def check_model(model: nn.Module, target: str) -> VisionTransformer:
    """ConfigError unless masked patch prediction can train `model` with `target` (run_parts.check_run
    refuses it under torchrun: its forward bypasses the DDP wrapper)."""
    if not isinstance(model, VisionTransformer) or model.config.backbone is not None:
        kind = (
            "a BiT ResNet" if not isinstance(model, VisionTransformer) else "a hybrid (its patches are ResNet features)"
        )
        raise ConfigError(f"objective.name=mpp: needs a ViT with a plain patch embedding, not {kind}")
    vit = model.config
    if vit.in_channels != 3:
        raise ConfigError(
            f"objective.name=mpp: the colour targets need 3 channels, not model in_channels={vit.in_channels}"
        )
    if target == "4x4" and vit.patch_size % CELLS:
        raise ConfigError(
            f"objective.mpp_target=4x4: patch size {vit.patch_size} is not divisible into {CELLS}x{CELLS} cells"
        )
    return model


def build_objective(config: TrainConfig, model: nn.Module, num_classes: int) -> Objective:
    if config.objective.name == "mpp":
        return MaskedPatchPrediction(config, model)
    return Classification(config, num_classes)
