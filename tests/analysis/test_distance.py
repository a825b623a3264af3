"""Mean attention distance against answers computed independently."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import pdist

from vitlab.analysis import attention_distance, patch_distances

pytestmark = pytest.mark.unit


def grid_mean_distance(grid: tuple[int, int], patch: int) -> float:
    """Mean pixel distance over all ordered pairs of patch centres, self-pairs included."""
    centres = np.array(list(itertools.product(range(grid[0]), range(grid[1]))), dtype=np.float64) * patch
    n = len(centres)
    return 2.0 * pdist(centres).sum() / (n * n)


@pytest.mark.parametrize("grid,patch", [((4, 4), 4), ((3, 5), 16), ((7, 7), 2)])
@pytest.mark.parametrize("prefix", [0, 1])
def test_uniform_attention_gives_the_grid_mean_distance(grid, patch, prefix):
    tokens = prefix + grid[0] * grid[1]
    uniform = torch.full((2, 3, tokens, tokens), 1.0 / tokens)  # also on the class token
    result = attention_distance([uniform, uniform], grid, patch, prefix)
    assert result.shape == (2, 2, 3)
    np.testing.assert_allclose(result.numpy(), grid_mean_distance(grid, patch), rtol=1e-6)


def test_identity_attention_gives_zero():
    eye = torch.eye(17).expand(1, 4, 17, 17)
    assert float(attention_distance([eye], (4, 4), 16, 1).abs().max()) == 0.0


def test_attending_to_a_neighbour_is_one_patch_away():
    grid, patch = (3, 4), 8
    n = grid[0] * grid[1]
    weights = torch.zeros(1, 1, n, n)
    for query in range(n):
        row, col = divmod(query, grid[1])
        neighbour = col + 1 if col + 1 < grid[1] else col - 1
        weights[0, 0, query, row * grid[1] + neighbour] = 1.0
    assert float(attention_distance([weights], grid, patch, 0)[0, 0, 0]) == pytest.approx(patch)


def test_heads_and_layers_keep_their_own_distance():
    grid, patch, n = (2, 2), 10, 4
    local = torch.eye(n)
    far = torch.zeros(n, n)
    far[[0, 1, 2, 3], [3, 2, 1, 0]] = 1.0  # each patch looks at the opposite corner
    layer = torch.stack([local, far])[None]  # (1, 2 heads, N, N)
    result = attention_distance([layer, layer.flip(1)], grid, patch, 0)[0]
    np.testing.assert_allclose(result.numpy(), [[0.0, 10 * math.sqrt(2)], [10 * math.sqrt(2), 0.0]], rtol=1e-6)


def test_patch_distances():
    distances = patch_distances((2, 3), 5)
    assert distances.shape == (6, 6)
    torch.testing.assert_close(distances, distances.t())
    assert float(distances.diagonal().abs().max()) == 0.0
    assert float(distances[0, 5]) == pytest.approx(5 * math.sqrt(1 + 4))  # (0,0) to (1,2)


def test_mismatched_grid_is_an_error():
    with pytest.raises(ValueError, match="4x4 grid"):
        attention_distance([torch.ones(1, 1, 10, 10)], (4, 4), 4, 1)
