"""Attention Rollout and raw attention maps: known answers, and the same pass as the prediction."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import randomise_
from vitlab.analysis import attention_maps, attention_rollout, masked_image, output_token_map, upsample_map
from vitlab.model import create_untrained

pytestmark = pytest.mark.unit


def tiny(**overrides):
    options = dict(image_size=16, depth=3, dim=32, num_heads=2, mlp_dim=64, num_classes=5)
    options.update(overrides)
    return randomise_(create_untrained("Ti/4", **options)).eval()


def random_attention(batch: int, heads: int, tokens: int, layers: int, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, tokens, tokens, generator=generator).softmax(-1) for _ in range(layers)]


def test_rollout_of_identity_layers_is_identity():
    tokens = 17
    eye = torch.eye(tokens).expand(2, 3, tokens, tokens)
    rollout = attention_rollout([eye] * 4)
    torch.testing.assert_close(rollout, torch.eye(tokens).expand(2, tokens, tokens))


def test_rollout_matches_product_of_residual_matrices():
    attentions = random_attention(batch=2, heads=3, tokens=5, layers=3)
    expected = []
    for b in range(2):
        product = np.eye(5)
        for layer in attentions:  # first layer first: R_l = (A_l + I)/2 R_{l-1}
            mixed = 0.5 * layer[b].double().numpy().mean(axis=0) + 0.5 * np.eye(5)
            product = mixed @ product
        expected.append(product)
    torch.testing.assert_close(attention_rollout(attentions).double(), torch.tensor(np.stack(expected)))
    # Without the residual it is the plain product of the head-averaged matrices.
    plain = attentions[2][0].mean(0) @ attentions[1][0].mean(0) @ attentions[0][0].mean(0)
    torch.testing.assert_close(attention_rollout(attentions, add_residual=False)[0], plain)


def test_rollout_rows_stay_distributions():
    rollout = attention_rollout(random_attention(batch=2, heads=4, tokens=10, layers=6))
    torch.testing.assert_close(rollout.sum(-1), torch.ones(2, 10))
    assert rollout.min() >= 0


def test_rollout_needs_layers():
    with pytest.raises(ValueError, match="at least one layer"):
        attention_rollout([])


def test_output_token_map_reads_class_row_or_mean_of_patch_rows():
    grid, tokens = (2, 3), 7
    matrix = torch.arange(tokens * tokens, dtype=torch.float32).reshape(1, tokens, tokens)
    with_class = output_token_map(matrix, grid, num_prefix_tokens=1)
    torch.testing.assert_close(with_class[0], torch.arange(1, 7, dtype=torch.float32).reshape(2, 3))
    gap = output_token_map(matrix[:, 1:, 1:], grid, num_prefix_tokens=0)  # 6 patch tokens, no class
    expected = matrix[0, 1:, 1:].mean(0).reshape(2, 3)
    torch.testing.assert_close(gap[0], expected)
    with pytest.raises(ValueError, match="do not match"):
        output_token_map(matrix, (3, 3), 1)


def test_maps_come_from_the_prediction_pass():
    model = tiny()
    images = torch.randn(3, 3, 16, 16)
    maps = attention_maps(model, images, layer=1, head=0)
    with torch.no_grad():
        torch.testing.assert_close(maps.logits, model(images), rtol=1e-5, atol=1e-5)
    assert maps.rollout.shape == maps.raw.shape == (3, 4, 4)
    expected_raw = maps.attentions[1][:, 0, 0, 1:].reshape(3, 4, 4)  # class token's row, head 0
    torch.testing.assert_close(maps.raw, expected_raw)
    assert (maps.layer, maps.head) == (1, 0)


@pytest.mark.parametrize("pool", ["token", "gap"])
def test_maps_at_another_resolution_and_pooling(pool):
    model = tiny(pool=pool)
    maps = attention_maps(model, torch.randn(2, 3, 24, 32))  # grid 6 x 8, E_pos resampled
    assert maps.rollout.shape == (2, 6, 8)
    assert len(maps.attentions) == 3 and maps.attentions[0].shape[-1] == model.config.num_prefix_tokens + 48
    # The rolled-out row is a distribution over tokens; its patch part can be at most 1.
    assert 0 < float(maps.rollout.sum(dim=(1, 2)).max()) <= 1 + 1e-5


def test_layer_and_head_are_checked():
    model = tiny()
    with pytest.raises(ValueError, match="layer 3 is out of range"):
        attention_maps(model, torch.randn(1, 3, 16, 16), layer=3)
    with pytest.raises(ValueError, match="head 2 is out of range"):
        attention_maps(model, torch.randn(1, 3, 16, 16), head=2)
    assert attention_maps(model, torch.randn(1, 3, 16, 16), layer=-3).layer == 0


def test_upsampled_map_peaks_at_one_where_the_patch_is():
    maps = torch.zeros(1, 4, 4)
    maps[0, 1, 2] = 0.3
    big = upsample_map(maps, (64, 64))
    assert big.shape == (1, 64, 64)
    assert float(big.max()) == pytest.approx(1.0)
    row, col = divmod(int(big[0].argmax()), 64)
    assert 16 <= row < 32 and 32 <= col < 48  # inside patch (1, 2)
    assert 0.0 <= float(big.min())


def test_masked_image_dims_by_the_map():
    image = torch.ones(2, 2, 3)
    heat = torch.tensor([[1.0, 0.5], [0.0, 0.25]])
    torch.testing.assert_close(masked_image(image, heat)[..., 0], heat)


# One layer, two heads, three tokens: rollout is that layer's (fused + I) / row sum.
HEADS = torch.tensor(
    [
        [[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8]],
        [[0.2, 0.2, 0.6], [0.4, 0.4, 0.2], [0.3, 0.6, 0.1]],
    ]
)[None]  # (1, 2, 3, 3)


def test_rollout_fuses_heads_by_max_or_min():
    # max over heads [[.6 .3 .6] [.4 .5 .3] [.3 .6 .8]], plus I, over the row sums 2.5, 2.2, 2.7
    expected_max = torch.tensor([[1.6, 0.3, 0.6], [0.4, 1.5, 0.3], [0.3, 0.6, 1.8]]) / torch.tensor(
        [[2.5], [2.2], [2.7]]
    )
    # min over heads [[.2 .2 .1] [.2 .4 .2] [.1 .1 .1]], plus I, over the row sums 1.5, 1.8, 1.3
    expected_min = torch.tensor([[1.2, 0.2, 0.1], [0.2, 1.4, 0.2], [0.1, 0.1, 1.1]]) / torch.tensor(
        [[1.5], [1.8], [1.3]]
    )
    torch.testing.assert_close(attention_rollout([HEADS], head_fusion="max")[0], expected_max)
    torch.testing.assert_close(attention_rollout([HEADS], head_fusion="min")[0], expected_min)
    # The default is still the mean: [[.4 .25 .35] [.3 .45 .25] [.2 .35 .45]], plus I, halved.
    mean = torch.tensor([[1.4, 0.25, 0.35], [0.3, 1.45, 0.25], [0.2, 0.35, 1.45]]) / 2
    torch.testing.assert_close(attention_rollout([HEADS])[0], mean)
    with pytest.raises(ValueError, match="head fusion 'median'"):
        attention_rollout([HEADS], head_fusion="median")


def test_discard_ratio_drops_the_lowest_weights_of_each_row():
    # Mean over heads as above; a third of 3 tokens is 1 weight per row: the 0.25, the 0.25, the 0.2.
    expected = torch.tensor([[1.4, 0.0, 0.35], [0.3, 1.45, 0.0], [0.0, 0.35, 1.45]]) / torch.tensor(
        [[1.75], [1.75], [1.8]]
    )
    torch.testing.assert_close(attention_rollout([HEADS], discard_ratio=0.34)[0], expected)
    # Below one weight per row nothing is dropped: the default rollout.
    torch.testing.assert_close(attention_rollout([HEADS], discard_ratio=0.3), attention_rollout([HEADS]))
    with pytest.raises(ValueError, match="discard ratio 1.0"):
        attention_rollout([HEADS], discard_ratio=1.0)


def test_discard_ratio_never_drops_the_class_tokens_self_attention():
    layer = torch.tensor([[0.1, 0.5, 0.4], [0.2, 0.3, 0.5], [0.6, 0.1, 0.3]])[None, None]  # one head
    # Row 0's lowest weight is its own 0.1: kept; rows 1 and 2 lose their 0.2 and 0.1.
    kept = torch.tensor([[1.1, 0.5, 0.4], [0.0, 1.3, 0.5], [0.6, 0.0, 1.3]]) / torch.tensor([[2.0], [1.8], [1.9]])
    torch.testing.assert_close(attention_rollout([layer], discard_ratio=0.34)[0], kept)
    # A model without a class token protects nothing: row 0 loses its 0.1 as well.
    unprotected = kept.clone()
    unprotected[0] = torch.tensor([1.0, 0.5, 0.4]) / 1.9
    torch.testing.assert_close(attention_rollout([layer], discard_ratio=0.34, protected_token=None)[0], unprotected)
