"""Principal components of the patch-embedding filters."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vitlab.analysis import embedding_filters, filters_as_images
from vitlab.model import create_untrained

pytestmark = pytest.mark.unit


def test_components_are_orthonormal_and_ordered():
    weight = create_untrained("Ti/4", image_size=16, depth=1, dim=64, num_heads=2, mlp_dim=64).patch_embed.proj.weight
    filters = embedding_filters(weight, num_components=28)
    assert filters.components.shape == (28, 3, 4, 4)
    flat = filters.components.reshape(28, -1)
    np.testing.assert_allclose(flat @ flat.T, np.eye(28), atol=1e-5)
    ratio = filters.explained_variance_ratio
    assert np.all(np.diff(ratio) <= 1e-7) and 0 < ratio.sum() <= 1 + 1e-6


def test_a_planted_filter_is_the_first_component():
    generator = torch.Generator().manual_seed(0)
    planted = torch.randn(3 * 8 * 8, generator=generator)
    planted /= planted.norm()
    weight = torch.randn(96, 1, generator=generator) * 5 * planted + 0.01 * torch.randn(96, 192, generator=generator)
    filters = embedding_filters(weight.reshape(96, 3, 8, 8), num_components=4)
    assert abs(float(filters.components[0].reshape(-1) @ planted.numpy())) == pytest.approx(1.0, abs=1e-3)
    assert filters.explained_variance_ratio[0] > 0.99


def test_components_are_capped_by_the_filter_count_and_size():
    # 10 filters, centred, span 9 directions: the 10th component would explain nothing and is dropped.
    assert embedding_filters(torch.randn(10, 3, 2, 2), num_components=28).components.shape[0] == 9
    assert embedding_filters(torch.randn(64, 1, 2, 2), num_components=28).components.shape[0] == 4
    with pytest.raises(ValueError, match=r"shape \(8, 12\)"):
        embedding_filters(torch.randn(8, 12))


def test_filters_as_images_stretch_each_component():
    rgb = filters_as_images(np.random.default_rng(0).normal(size=(5, 3, 4, 4)))
    assert rgb.shape == (5, 4, 4, 3)
    np.testing.assert_allclose(rgb.min(axis=(1, 2, 3)), 0.0, atol=1e-12)
    np.testing.assert_allclose(rgb.max(axis=(1, 2, 3)), 1.0)
    grey = filters_as_images(np.random.default_rng(0).normal(size=(2, 1, 4, 4)))
    np.testing.assert_array_equal(grey[..., 0], grey[..., 2])
