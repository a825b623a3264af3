"""Axial-ViT's row and column weights as (T, T) matrices (analysis/axial.py), checked on a 2x2 grid
written out by hand, and rollout and attention distance on a real Axial-ViT through them."""

from __future__ import annotations

import torch

from helpers import randomise_
from vitlab.analysis.axial import expand_axial_attention
from vitlab.analysis.distance import attention_distance
from vitlab.analysis.rollout import attention_maps
from vitlab.model import create_untrained
from vitlab.model.axial import AxialAttention

# Tokens of the 2x2 grid, row-major: 0 = (0, 0), 1 = (0, 1), 2 = (1, 0), 3 = (1, 1).
a, b, c, d = 0.9, 0.3, 0.6, 0.2  # row 0's two queries, row 1's
e, f, g, k = 0.7, 0.4, 0.8, 0.1  # column 0's two queries, column 1's


def two_by_two() -> AxialAttention:
    row = torch.tensor([[[a, 1 - a], [b, 1 - b]], [[c, 1 - c], [d, 1 - d]]])  # (h, w, w)
    column = torch.tensor([[[e, 1 - e], [f, 1 - f]], [[g, 1 - g], [k, 1 - k]]])  # (w, h, h)
    return AxialAttention(row[None, :, None], column[None, :, None])  # batch 1, one head


def test_a_2x2_grid_expands_to_the_matrices_written_out():
    rows, columns = (m[0, 0] for m in expand_axial_attention([two_by_two()]))
    expected_rows = torch.tensor([[a, 1 - a, 0, 0], [b, 1 - b, 0, 0], [0, 0, c, 1 - c], [0, 0, d, 1 - d]])
    expected_columns = torch.tensor([[e, 0, 1 - e, 0], [0, g, 0, 1 - g], [f, 0, 1 - f, 0], [0, k, 0, 1 - k]])
    torch.testing.assert_close(rows, expected_rows)
    torch.testing.assert_close(columns, expected_columns)
    # One block, row then column: (0, 0) reaches (1, 1) only through (1, 0).
    assert torch.isclose((columns @ rows)[0, 3], torch.tensor((1 - e) * (1 - c)))
    # Distance: a row head attends horizontally only, a column head vertically (patch size 10).
    distance = attention_distance([rows[None, None], columns[None, None]], (2, 2), 10, 0)[0, :, 0]
    expected = torch.tensor([10 * ((1 - a) + b + (1 - c) + d) / 4, 10 * ((1 - e) + (1 - g) + f + k) / 4])
    torch.testing.assert_close(distance, expected)


@torch.no_grad()
def test_rollout_and_distance_of_an_axial_vit():
    model = randomise_(create_untrained("Axial-Ti/16", image_size=(48, 32), depth=2, num_classes=3), std=0.05).eval()
    maps = attention_maps(model, torch.randn(2, 3, 48, 32))
    assert len(maps.attentions) == 4 and maps.attentions[0].shape == (2, 3, 6, 6)  # R_1, C_1, R_2, C_2
    for matrix in maps.attentions:
        torch.testing.assert_close(matrix.sum(dim=-1), torch.ones(2, 3, 6))
    assert maps.rollout.shape == (2, 3, 2) and maps.rollout.std() > 1e-4
    distance = attention_distance(maps.attentions, (3, 2), 16, 0)
    assert distance.shape == (2, 4, 3) and (distance > 0).all()
