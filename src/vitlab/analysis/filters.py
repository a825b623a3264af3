"""Embedding filters (paper Fig. 7 left): principal components of the patch-embedding weights E.

Each of the D rows of E is a filter over a P x P x C patch. The leading principal components of
those D filters are the basis functions the model projects patches on; in a trained model they
resemble the low-frequency basis functions of a CNN's first layer.

A hybrid's E is a 1 x 1 projection of ResNet feature channels (patch size 1), no filter over pixels,
and a BiT ResNet has no E at all; for both, the filters that meet the pixels are those of the
ResNet's root convolution, so that is what their figure shows (as the standardised weights the
convolution applies).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.decomposition import PCA
from torch import nn

MIN_VARIANCE_RATIO = 1e-6  # components explaining less are numerical noise


@dataclass
class PixelFilters:
    """The first layer that sees pixels: its weight (D, C, k, k) and what it is, for titles."""

    weight: torch.Tensor
    kind: str  # "patch embedding" or "root convolution"
    source: str  # e.g. "the patch embedding E", "the hybrid's ResNet root convolution"


def pixel_filters(model: nn.Module) -> PixelFilters:
    """E of a ViT; the root convolution of a hybrid's backbone or of a BiT ResNet."""
    embed = getattr(model, "patch_embed", None)
    backbone = getattr(embed, "backbone", None)
    if backbone is not None:
        return PixelFilters(
            backbone.stem.conv.standardised_weight(),
            "root convolution",
            "the hybrid's ResNet root convolution (its E is a 1x1 projection of feature channels)",
        )
    proj = getattr(embed, "proj", None)
    if isinstance(proj, nn.Conv2d):
        return PixelFilters(proj.weight, "patch embedding", "the patch embedding E")
    stem = getattr(model, "stem", None)
    if stem is not None and hasattr(stem.conv, "standardised_weight"):
        return PixelFilters(stem.conv.standardised_weight(), "root convolution", "the ResNet's root convolution")
    raise ValueError(f"{type(model).__name__}: has neither a linear patch embedding nor a ResNet root convolution")


@dataclass
class EmbeddingFilters:
    components: np.ndarray  # (K, C, P, P); flattened, the rows are orthonormal
    explained_variance_ratio: np.ndarray  # (K,), descending


def embedding_filters(weight: torch.Tensor, num_components: int = 28) -> EmbeddingFilters:
    """The first `num_components` principal components of the patch-embedding weight (D, C, P, P)."""
    if weight.dim() != 4:
        raise ValueError(f"expected a patch-embedding weight (dim, channels, P, P), got shape {tuple(weight.shape)}")
    filters = weight.detach().float().cpu().numpy()
    flat = filters.reshape(filters.shape[0], -1)  # (D, C*P*P): one filter per row
    count = min(num_components, *flat.shape)
    pca = PCA(n_components=count, svd_solver="full").fit(flat)
    # A direction of no variance is no basis function: weight-standardised filters (a ResNet's root
    # convolution) all have zero mean, so the constant direction carries nothing and would draw as a
    # flat square.
    kept = int((pca.explained_variance_ratio_ > MIN_VARIANCE_RATIO).sum())
    return EmbeddingFilters(
        components=pca.components_[:kept].reshape(kept, *filters.shape[1:]),
        explained_variance_ratio=pca.explained_variance_ratio_[:kept],
    )


def filters_as_images(components: np.ndarray) -> np.ndarray:
    """(K, C, P, P) -> (K, P, P, 3) in [0, 1], each component stretched to its own range (as Fig. 7).

    Three channels are shown as RGB; any other count as grey (the mean over channels).
    """
    images = components.transpose(0, 2, 3, 1)  # (K, P, P, C)
    if images.shape[-1] != 3:
        images = np.repeat(images.mean(axis=-1, keepdims=True), 3, axis=-1)
    low = images.min(axis=(1, 2, 3), keepdims=True)
    high = images.max(axis=(1, 2, 3), keepdims=True)
    return (images - low) / np.maximum(high - low, 1e-12)
