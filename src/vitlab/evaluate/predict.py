"""Class probabilities for single images, preprocessed as the model's config says."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from PIL import Image
from torchvision.transforms import v2

from vitlab.data import transforms
from vitlab.model import BiTConfig, ViTConfig
from vitlab.progress import progress


def model_config(model: torch.nn.Module) -> ViTConfig | BiTConfig:
    """The config of a vitlab classifier (a VisionTransformer, BiTResNet or a wrapper that carries one)."""
    config = getattr(model, "config", None)
    if not isinstance(config, (ViTConfig, BiTConfig)):
        raise TypeError(f"{type(model).__name__} carries no vitlab config (ViTConfig or BiTConfig)")
    return config


def eval_transform(config: ViTConfig | BiTConfig) -> v2.Compose:
    """Resize + centre crop to the model's image size, normalised with its stored mean/std."""
    return transforms.eval_transform(config.image_size, config.preprocessing)


def class_names(config: ViTConfig | BiTConfig) -> list[str]:
    """The name of each output class (its number where the config names none); a feature extractor
    has none to predict."""
    if config.num_classes == 0:
        raise ValueError(
            f"{config.name or 'this model'} is a feature extractor (num_classes=0): it has no classes to predict, "
            f"its output is the {config.feature_dim}-wide representation; fine-tune it with num_classes=K"
        )
    return list(config.class_names or [str(i) for i in range(config.num_classes)])


@dataclass
class Prediction:
    """The top classes of one image, most probable first: (label, probability) pairs."""

    top: list[tuple[str, float]]

    @property
    def label(self) -> str:
        return self.top[0][0]


@torch.no_grad()
def predict_images(
    model: torch.nn.Module,
    images: Sequence[Image.Image],
    *,
    topk: int = 5,
    batch_size: int = 64,
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> list[Prediction]:
    """Top-k predictions of a vitlab classifier for RGB PIL images."""
    config = model_config(model)
    if topk < 1:
        raise ValueError(f"topk must be >= 1, got {topk}")
    names = class_names(config)
    transform = eval_transform(config)
    device = next(model.parameters()).device
    model.eval()
    predictions: list[Prediction] = []
    starts = range(0, len(images), batch_size)
    for start in progress(starts, "predict", total=len(starts)):
        batch = torch.stack([transform(image) for image in images[start : start + batch_size]]).to(device)
        with autocast():
            logits = model(batch)
        predictions += [Prediction(top) for top in top_classes(logits, names, topk)]
    return predictions


def top_classes(logits: torch.Tensor, names: Sequence[str], topk: int) -> list[list[tuple[str, float]]]:
    """The `topk` most probable (name, probability) pairs of each row of (B, K) logits."""
    probabilities = logits.float().softmax(dim=1)  # (B, K)
    values, indices = probabilities.topk(min(topk, probabilities.shape[1]), dim=1)
    return [
        [(names[i], p) for i, p in zip(row_indices, row_values)]
        for row_values, row_indices in zip(values.tolist(), indices.tolist())
    ]
