"""E_pos resampling agrees with timm's resample_abs_pos_embed and with vit_jax's linear zoom."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vitlab.model import resample_pos_embed

pytestmark = pytest.mark.unit

timm_layers = pytest.importorskip("timm.layers")
scipy_ndimage = pytest.importorskip("scipy.ndimage")

GRIDS = [((4, 4), (7, 7)), ((8, 8), (5, 5)), ((6, 4), (9, 12)), ((14, 14), (24, 24))]


def table(grid, prefix, dim=16):
    return torch.randn(1, prefix + grid[0] * grid[1], dim, generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("prefix", [1, 0])
@pytest.mark.parametrize("old, new", GRIDS)
def test_matches_timm(mode, antialias, prefix, old, new):
    pos = table(old, prefix)
    ours = resample_pos_embed(pos, new, old, prefix, mode=mode, antialias=antialias)
    theirs = timm_layers.resample_abs_pos_embed(
        pos, list(new), list(old), prefix, interpolation=mode, antialias=antialias
    )
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("old, new", GRIDS)
def test_linear_zoom_matches_vit_jax_scipy_zoom(old, new):
    """vit_jax (checkpoint.py): scipy.ndimage.zoom(grid, (new/old, new/old, 1), order=1) without the class slot."""
    pos = table(old, 1)
    ours = resample_pos_embed(pos, new, old, 1, mode="linear_zoom")
    grid = pos[0, 1:].reshape(old[0], old[1], -1).numpy()
    zoomed = scipy_ndimage.zoom(grid, (new[0] / old[0], new[1] / old[1], 1), order=1)
    assert zoomed.shape[:2] == new
    np.testing.assert_allclose(ours[0, 1:].numpy(), zoomed.reshape(-1, grid.shape[-1]), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(ours[:, :1], pos[:, :1], rtol=0, atol=0)
