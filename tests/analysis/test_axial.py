"""Axial-ViT's row and column weights as (T, T) matrices (analysis/axial.py), checked on a 2x2 grid
written out by hand, and rollout, attention distance, Attention Flow and class relevance on a real
Axial-ViT through them, also by `vitlab analyze`."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

from helpers import randomise_
from vitlab.analysis.axial import expand_axial_attention, regroup, token_attention, weight_tensors
from vitlab.analysis.distance import attention_distance
from vitlab.analysis.explain import flow_map
from vitlab.analysis.flow import attention_flow
from vitlab.analysis.relevance import class_relevance, relevance_rule
from vitlab.analysis.rollout import attention_maps, attention_rollout, layer_attention
from vitlab.cli import main
from vitlab.model import create_untrained
from vitlab.model.axial import AxialAttention

# Tokens of the 2x2 grid, row-major: 0 = (0, 0), 1 = (0, 1), 2 = (1, 0), 3 = (1, 1).
a, b, c, d = 0.9, 0.3, 0.6, 0.2  # row 0's two queries, row 1's
e, f, g, k = 0.7, 0.4, 0.8, 0.1  # column 0's two queries, column 1's


def two_by_two() -> AxialAttention:
    row = torch.tensor([[[a, 1 - a], [b, 1 - b]], [[c, 1 - c], [d, 1 - d]]])  # (h, w, w)
    column = torch.tensor([[[e, 1 - e], [f, 1 - f]], [[g, 1 - g], [k, 1 - k]]])  # (w, h, h)
    return AxialAttention(row[None, :, None], column[None, :, None])  # batch 1, one head


@pytest.mark.unit
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


@pytest.mark.integration
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


def tiny_axial(depth: int = 1) -> torch.nn.Module:
    options = dict(image_size=(12, 8), depth=depth, dim=16, num_heads=2, mlp_dim=32, num_classes=4)
    return randomise_(create_untrained("Axial-Ti/4", **options), std=0.3).eval()


@pytest.mark.unit
@torch.no_grad()
def test_flow_of_one_axial_layer_is_the_narrower_of_its_one_path():
    # One AxialBlock: output (i, j) reaches input (i2, j2) only through (i2, j), column layer then
    # row layer, so the maximum flow is the smaller of those two edges (rollout: their product).
    model = tiny_axial()
    images = torch.randn(1, 3, 12, 8, generator=torch.Generator().manual_seed(1))
    _, weights = model.forward_with_attention(images)
    rows, columns = (layer_attention(m)[0] for m in expand_axial_attention(weights))
    height, width = 3, 2
    expected = torch.zeros(6, 6)
    for i, j, i2, j2 in itertools.product(range(height), range(width), range(height), range(width)):
        expected[i * width + j, i2 * width + j2] = min(
            columns[i * width + j, i2 * width + j], rows[i2 * width + j, i2 * width + j2]
        )
    expected = expected / expected.sum(dim=-1, keepdim=True)
    flow = attention_flow(token_attention(weights))[0]
    torch.testing.assert_close(flow, expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(flow, attention_rollout(token_attention(weights))[0], atol=1e-3)
    logits, maps = flow_map(model, images)  # what `analyze --what flow` draws: the mean of the patch rows
    torch.testing.assert_close(maps[0], expected.mean(dim=0).reshape(height, width), rtol=1e-5, atol=1e-6)


@pytest.mark.unit
def test_relevance_of_an_axial_vit_takes_the_gradient_of_its_row_and_column_weights():
    model = tiny_axial(depth=2)
    images = torch.randn(2, 3, 12, 8, generator=torch.Generator().manual_seed(2))
    first, second = class_relevance(model, images, target=0), class_relevance(model, images, target=3)
    assert first.relevance.shape == (2, 6, 6) and first.maps.shape == (2, 3, 2)
    # The gradient by another route: with respect to the tensors the row and column views were taken of.
    inputs = images.clone().requires_grad_(True)
    logits, weights = model.forward_with_attention(inputs)
    tensors = weight_tensors(weights)
    grads = torch.autograd.grad(logits[:, 0].sum(), [t._base for t in tensors])
    grads = [g.reshape(t.shape) for g, t in zip(grads, tensors)]
    by_hand = relevance_rule(
        token_attention(regroup(weights, [t.detach() for t in tensors])), token_attention(regroup(weights, grads))
    )
    torch.testing.assert_close(first.relevance, by_hand, rtol=1e-5, atol=1e-6)
    assert (first.relevance - torch.eye(6)).abs().amax() > 1e-3  # the layers added something
    assert (first.maps - second.maps).abs().amax() > 1e-4  # and it depends on the class


@pytest.mark.integration
def test_analyze_command_runs_every_attention_analysis_on_an_axial_vit(tmp_path):
    model = randomise_(
        create_untrained("Axial-Ti/4", image_size=16, depth=2, dim=32, num_heads=2, mlp_dim=64, num_classes=10),
        std=0.1,
    )
    model.config.class_names = [str(d) for d in range(10)]
    model.config.preprocessing.crop_pct = 1.0
    model.save_pretrained(tmp_path / "model")
    out = tmp_path / "analysis"
    argv = ["analyze", "--ckpt", str(tmp_path / "model"), "--out", str(out), "--max-images", "4", "--show", "2"]
    assert main([*argv, "--what", "rollout,distance,flow,relevance", "--device", "cpu"]) == 0
    numbers = json.loads((out / "analysis.json").read_text())
    assert np.array(numbers["rollout"]["maps"]).shape == (2, 4, 4)
    assert np.array(numbers["attention_flow"]["maps"]).shape == (2, 4, 4)
    assert np.array(numbers["class_relevance"]["maps"]).shape == (2, 4, 4)
    distance = np.array(numbers["mean_attention_distance"]["pixels"])
    assert distance.shape == (4, 2) and (distance > 0).all()  # R_1, C_1, R_2, C_2 by head
