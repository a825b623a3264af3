"""Attention Flow: a two-layer graph worked out by hand, a deeper one against a linear program."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

from vitlab.analysis import attention_flow, attention_rollout
from vitlab.analysis.rollout import layer_attention

pytestmark = pytest.mark.unit

# Residual-augmented, row-normalised weights (A + I) / 2 of two layers over three tokens; the
# raw attention given to the functions is A = 2 W - I (rows sum to 1, no negative entry).
W1 = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.75, 0.25], [0.5, 0.0, 0.5]])
W2 = torch.tensor([[0.5, 0.25, 0.25], [0.5, 0.5, 0.0], [0.0, 0.25, 0.75]])


def raw(weights: torch.Tensor) -> torch.Tensor:
    return (2 * weights - torch.eye(3))[None, None]  # (1 image, 1 head, 3, 3)


def test_two_layer_flow_by_hand_differs_from_rollout():
    # With two layers every path out -> k -> in is disjoint from the others, so the maximum flow
    # is sum_k min(W2[out, k], W1[k, in]). Output 0 (W2 row .5 .25 .25):
    #   to 0: min(.5, .5) + min(.25, 0) + min(.25, .5) = .75
    #   to 1: min(.5, .5) + min(.25, .75) + min(.25, 0) = .75
    #   to 2: min(.5, 0) + min(.25, .25) + min(.25, .5) = .5      -> / 2.0
    # Output 1 (.5 .5 0): .5, .5 + .5, .25 -> / 1.75. Output 2 (0 .25 .75): .5, .25, .25 + .5 -> / 1.5.
    expected = torch.tensor(
        [
            [0.75, 0.75, 0.5],
            [0.5, 1.0, 0.25],
            [0.5, 0.25, 0.75],
        ]
    ) / torch.tensor([[2.0], [1.75], [1.5]])
    attentions = [raw(W1), raw(W2)]
    flow = attention_flow(attentions)
    assert flow.shape == (1, 3, 3)
    torch.testing.assert_close(flow[0], expected)
    # Rollout multiplies along the paths instead: row 0 is .375, .4375, .1875, not .375, .375, .25.
    rollout = attention_rollout(attentions)[0]
    torch.testing.assert_close(rollout, W2 @ W1)
    torch.testing.assert_close(rollout[0], torch.tensor([0.375, 0.4375, 0.1875]))
    assert (flow[0] - rollout).abs().max() > 0.05
    # Only the rows asked for, in that order.
    torch.testing.assert_close(attention_flow(attentions, rows=[2, 0])[0], expected[[2, 0]])


def max_flow_by_linear_program(layers: list[np.ndarray], source: int, sink: int) -> float:
    """Max flow from output `source` to input `sink` of the layered graph, as a linear program."""
    depth, tokens = len(layers), layers[0].shape[0]
    edges = [(layer, i, j) for layer in range(1, depth + 1) for i in range(tokens) for j in range(tokens)]
    capacity = [layers[layer - 1][i, j] for layer, i, j in edges]
    # Conservation at every node strictly between the source's layer and the sink's.
    inner = [(layer, t) for layer in range(1, depth) for t in range(tokens)]
    conservation = np.zeros((len(inner), len(edges)))
    for e, (layer, i, j) in enumerate(edges):
        if (layer, i) in inner:
            conservation[inner.index((layer, i)), e] -= 1  # leaves (layer, i)
        if (layer - 1, j) in inner:
            conservation[inner.index((layer - 1, j)), e] += 1  # enters (layer - 1, j)
    # Flow may start only at the source and end only at the sink.
    usable = [
        (0, c) if (layer < depth or i == source) and (layer > 1 or j == sink) else (0, 0)
        for (layer, i, j), c in zip(edges, capacity)
    ]
    into_sink = np.array([1.0 if layer == 1 and j == sink else 0.0 for layer, i, j in edges])
    result = linprog(-into_sink, A_eq=conservation, b_eq=np.zeros(len(inner)), bounds=usable, method="highs")
    assert result.status == 0
    return -result.fun


def test_three_layer_flow_matches_a_linear_program():
    generator = torch.Generator().manual_seed(3)
    attentions = [torch.randn(2, 2, 4, 4, generator=generator).mul(2).softmax(-1) for _ in range(3)]
    flow = attention_flow(attentions)
    for image in range(2):
        layers = [layer_attention(a)[image].double().numpy() for a in attentions]
        values = np.array([[max_flow_by_linear_program(layers, i, j) for j in range(4)] for i in range(4)])
        expected = values / values.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(flow[image].numpy(), expected, atol=1e-5)
    assert flow.std() > 0.01  # not a uniform answer


@pytest.mark.fault("bad-input", kinds=4)
def test_flow_refuses_too_many_tokens_and_bad_rows():
    big = [torch.full((1, 1, 66, 66), 1 / 66)]
    with pytest.raises(ValueError, match="66 tokens is above the limit of 65.*max_tokens=66"):
        attention_flow(big)
    with pytest.raises(ValueError, match=r"rows \[3\] are not output tokens of a 3-token model"):
        attention_flow([raw(W1)], rows=[0, 3])
    with pytest.raises(ValueError, match="rows \\(none\\)"):
        attention_flow([raw(W1)], rows=[])
    with pytest.raises(ValueError, match="at least one layer"):
        attention_flow([])
    # Raising the limit lets it through. Over one layer each pair has one edge: flow is rollout,
    # here (1/66 + 1) / 2 to itself and 1/132 to each other token.
    expected = torch.full((1, 1, 66), 1 / 132)
    expected[0, 0, 0] = (1 / 66 + 1) / 2
    torch.testing.assert_close(attention_flow(big, rows=[0], max_tokens=66), expected)
