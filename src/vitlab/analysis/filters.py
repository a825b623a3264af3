"""Embedding filters (paper Fig. 7 left): principal components of the patch-embedding weights E.

Each of the D rows of E is a filter over a P x P x C patch. The leading principal components of
those D filters are the basis functions the model projects patches on; in a trained model they
resemble the low-frequency basis functions of a CNN's first layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.decomposition import PCA


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
    return EmbeddingFilters(
        components=pca.components_.reshape(count, *filters.shape[1:]),
        explained_variance_ratio=pca.explained_variance_ratio_,
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
