"""The CPU attention path at the paper's fine-tuning resolution: 384 px, 577 tokens for /16."""

from __future__ import annotations

import pytest
import torch

from vitlab.accel.blocked import QUERY_BLOCK, blocked_attention, cpu_softmax
from vitlab.accel.layers import matmul_attention_is_faster
from vitlab.model import config_for
from vitlab.model.attention import softmax_attention

pytestmark = pytest.mark.unit


def test_bf16_at_577_tokens_takes_the_matmul_path_and_matches_the_softmax():
    tokens = config_for("S/16", image_size=384).num_patches + 1
    assert tokens == 577 and tokens % QUERY_BLOCK  # a partial last block of queries
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, tokens, 16, generator=generator, dtype=torch.bfloat16) for _ in range(3))
    # Measured at T = 577 the whole model ties (accel/layers.py): the path chosen for this machine does not
    # depend on the sequence length.
    assert matmul_attention_is_faster(q) == matmul_attention_is_faster(q[:, :, :197])
    assert not matmul_attention_is_faster(q.float())
    expected, _ = softmax_attention(q, k, v, 0.25, softmax=cpu_softmax)  # the accelerated written-out path
    assert expected.abs().max() > 0.1
    torch.testing.assert_close(blocked_attention(q, k, v, 0.25), expected, rtol=0, atol=0)
