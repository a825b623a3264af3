"""Attention Flow (Abnar & Zuidema, 2020, "Quantifying Attention Flow in Transformers", Sec. 3).

The attention of all layers is read as one layered graph: a node per token at each layer
(layer 0 the inputs, layer L the outputs), and an edge from token i at layer l to token j at
layer l - 1 whose capacity is the weight rollout uses, the head-averaged attention with the
identity added for the residual and the rows renormalised (`layer_attention`). The flow from
output token i to input token j is the value of a maximum flow from one to the other; each
output's row is then divided by its sum, as the authors' code does, so that it reads like
rollout's row. Rollout multiplies the weights along every path and adds the paths; flow is
bounded by the narrowest edges, and so spreads its mass more evenly over the inputs.

A maximum flow per (output, input) pair makes the cost grow fast: T^2 problems on a graph of
L T^2 edges. `attention_flow` therefore refuses more than `max_tokens` tokens (default
MAX_FLOW_TOKENS) unless told otherwise, and computes only the output rows asked for.

An Axial-ViT enters as its expanded row and column matrices, R_1, C_1, R_2, C_2, ..., one graph
layer per sub-block (analysis/axial.py): a row layer links only tokens of one grid row, a column
layer only tokens of one column.
"""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx
import numpy as np
import torch
from networkx.algorithms.flow import build_residual_network, shortest_augmenting_path

from .rollout import layer_attention

# 65 tokens: a 32 x 32 image at P = 4 plus the class token. Each output row costs T maximum flows
# on a graph of L T^2 edges; for a ViT-B/16 at 224 px (197 tokens) that is minutes per row.
MAX_FLOW_TOKENS = 65


def attention_graph(layers: Sequence[np.ndarray]) -> nx.DiGraph[tuple[int, int]]:
    """(T, T) token mixing per layer, first to last -> the layered graph with node (layer, token).

    Layer l's matrix gives the edges from its outputs (l, i) to its inputs (l - 1, j). Only
    positive weights become edges: networkx reads an edge without capacity as unbounded.
    """
    graph: nx.DiGraph[tuple[int, int]] = nx.DiGraph()  # nodes (layer, token)
    for index, matrix in enumerate(layers, start=1):
        rows, cols = np.nonzero(matrix > 0)
        graph.add_edges_from(
            ((index, int(i)), (index - 1, int(j)), {"capacity": float(matrix[i, j])}) for i, j in zip(rows, cols)
        )
    return graph


def flow_rows(layers: Sequence[np.ndarray], rows: Sequence[int]) -> np.ndarray:
    """Maximum flow from each output token in `rows` to every input token -> (len(rows), T), raw.

    The authors' code uses Edmonds-Karp; the shortest-augmenting-path method finds the same
    maximum (the value is unique) many times faster on these dense graphs, and like Edmonds-Karp
    it only adds and subtracts the real capacities. One residual network serves every pair (each
    call resets it).
    """
    depth, tokens = len(layers), layers[0].shape[-1]
    graph = attention_graph(layers)
    residual = build_residual_network(graph, "capacity")
    flows = np.zeros((len(rows), tokens))
    for r, source in enumerate(rows):
        for sink in range(tokens):
            if (depth, source) in graph and (0, sink) in graph:
                solved = shortest_augmenting_path(graph, (depth, source), (0, sink), residual=residual)
                flows[r, sink] = solved.graph["flow_value"]
    return flows


def attention_flow(
    attentions: Sequence[torch.Tensor],
    add_residual: bool = True,
    rows: Sequence[int] | None = None,
    max_tokens: int = MAX_FLOW_TOKENS,
) -> torch.Tensor:
    """Per-layer attention (B, heads, T, T) -> attention flow (B, T, T), or (B, len(rows), T).

    Entry (i, j): the maximum flow from output token i to input token j over all layers, each
    row divided by its sum. rows: the output tokens to compute (e.g. [0], the class token, for
    `output_token_map` of a class-token model); None computes all T. Raise max_tokens to allow
    more tokens than MAX_FLOW_TOKENS, knowing the cost.
    """
    if not attentions:
        raise ValueError("attention flow needs the attention of at least one layer, got none")
    tokens = attentions[0].shape[-1]
    if tokens > max_tokens:
        raise ValueError(
            f"attention flow over {tokens} tokens is above the limit of {max_tokens} (one maximum flow "
            f"per token pair); pass max_tokens={tokens} to compute it anyway"
        )
    chosen = list(range(tokens)) if rows is None else [int(r) for r in rows]
    bad = [r for r in chosen if not 0 <= r < tokens]
    if bad or not chosen:
        raise ValueError(f"rows {bad or '(none)'} are not output tokens of a {tokens}-token model")
    layers = [layer_attention(weights, add_residual).cpu().double().numpy() for weights in attentions]
    flows = []
    for image in range(layers[0].shape[0]):
        raw = flow_rows([layer[image] for layer in layers], chosen)
        flows.append(raw / np.maximum(raw.sum(axis=-1, keepdims=True), 1e-12))
    return torch.from_numpy(np.stack(flows)).to(device=attentions[0].device, dtype=torch.float32)
