"""Eq. 1's patch embedding cuts patches in row-major order, channel first."""

from __future__ import annotations

import pytest
import torch

from vitlab.model.patch_embed import patches

pytestmark = pytest.mark.unit


def test_patches_are_row_major_and_channel_first():
    images = torch.arange(2 * 3 * 4 * 6, dtype=torch.float32).reshape(2, 3, 4, 6)
    tiles = patches(images, 2)  # a 2 x 3 grid of 2 x 2 patches
    assert tiles.shape == (2, 6, 3, 2, 2)
    torch.testing.assert_close(tiles[1, 4], images[1, :, 2:4, 2:4])  # second row, middle column
    torch.testing.assert_close(tiles[0, 2], images[0, :, 0:2, 4:6])


def test_an_empty_batch_keeps_its_shape():
    """A process's share of an uneven evaluation split may be empty; its forward must not fail."""
    assert patches(torch.zeros(0, 3, 8, 12), 4).shape == (0, 6, 3, 4, 4)
