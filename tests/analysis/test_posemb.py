"""Position-embedding similarity for every kind of embedding that has one."""

from __future__ import annotations

import pytest
import torch

from vitlab.analysis import position_embedding_table, position_similarity
from vitlab.model import create_untrained

pytestmark = pytest.mark.unit


def tiny(pos_embed: str, pool: str = "token"):
    return create_untrained(
        "Ti/4",
        image_size=(16, 24),
        depth=1,
        dim=32,
        num_heads=2,
        mlp_dim=64,
        num_classes=3,
        pos_embed=pos_embed,
        pool=pool,
    ).eval()


@pytest.mark.parametrize("pos_embed", ["learned", "2d", "sincos"])
@pytest.mark.parametrize("pool", ["token", "gap"])
def test_similarity_diagonal_is_one(pos_embed, pool):
    table, grid = position_embedding_table(tiny(pos_embed, pool))
    assert grid == (4, 6) and table.shape == (24, 32)
    similarity = position_similarity(table, grid)
    assert similarity.shape == (4, 6, 4, 6)
    flat = similarity.reshape(24, 24)
    torch.testing.assert_close(flat.diagonal(), torch.ones(24))
    torch.testing.assert_close(flat, flat.t())
    assert float(flat.abs().max()) <= 1 + 1e-6


def test_learned_table_is_the_patch_part_of_e_pos():
    model = tiny("learned")
    table, _ = position_embedding_table(model)
    torch.testing.assert_close(table, model.pos_embed.weight[0, 1:])


def test_orthogonal_embeddings_are_dissimilar():
    table = torch.eye(6) * torch.arange(1, 7)[:, None]  # orthogonal, of different lengths
    torch.testing.assert_close(position_similarity(table, (2, 3)).reshape(6, 6), torch.eye(6))


def test_sincos_similarity_depends_only_on_the_offset():
    table, grid = position_embedding_table(tiny("sincos"))
    similarity = position_similarity(table, grid)
    one_right = [float(similarity[r, c, r, c + 1]) for r in range(4) for c in range(5)]
    assert max(one_right) - min(one_right) < 1e-5
    assert one_right[0] > float(similarity[0, 0, 0, 5])  # neighbours are more alike than far patches


def test_axial_embedding_similarity_counts_shared_row_and_column():
    # Table 8's 2-D embedding is [X_col, Y_row]. With one-hot X and Y every patch has norm sqrt(2)
    # and two patches' cosine similarity is ([same column] + [same row]) / 2.
    model = tiny("2d")
    with torch.no_grad():
        model.pos_embed.row_embed.copy_(torch.eye(4, 16))
        model.pos_embed.col_embed.copy_(torch.eye(6, 16))
    similarity = position_similarity(*position_embedding_table(model))
    rows = torch.arange(4)[:, None, None, None]
    cols = torch.arange(6)[None, :, None, None]
    expected = ((rows == rows.view(1, 1, 4, 1)).float() + (cols == cols.view(1, 1, 1, 6)).float()) / 2
    torch.testing.assert_close(similarity, expected)


@pytest.mark.parametrize(
    "kind,words",
    [
        ("none", "no position embedding"),
        ("relative", "relative position embeddings"),
        ("relative_bias", "relative position biases"),
    ],
)
def test_models_without_patch_embeddings_are_refused(kind, words):
    with pytest.raises(ValueError, match=f"pos_embed='{kind}'.*{words}"):
        position_embedding_table(tiny(kind))


def test_table_must_fill_the_grid():
    with pytest.raises(ValueError, match="4x4 grid"):
        position_similarity(torch.ones(15, 8), (4, 4))
