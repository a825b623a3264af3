"""The model's two attention paths and its class-token-only last layer compute the paper's numbers.

- the last layer computing only the class token's row (VisionTransformer.forward);
- the fused kernel and the softmax written out (which also returns the weights).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import vitlab
from helpers import randomise_
from vitlab.model.attention import softmax_attention

pytestmark = pytest.mark.unit


def tiny_model(**overrides) -> vitlab.VisionTransformer:
    options = dict(image_size=32, num_classes=7, dim=64, depth=3, num_heads=2, mlp_dim=128)
    options.update(overrides)
    return randomise_(vitlab.create_model("Ti/8", **options), std=0.05).eval()


def reference(model: vitlab.VisionTransformer, images: torch.Tensor) -> torch.Tensor:
    """Every layer over every token, as the paper writes it."""
    with torch.no_grad():
        return model.forward_head(model.forward_features(images))


@pytest.mark.parametrize("pos_embed", ["learned", "relative", "relative_bias"])
def test_class_token_only_last_layer_matches_all_tokens(pos_embed):
    model = tiny_model(pos_embed=pos_embed)
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        tokens, _ = model.encode(images, prefix_only=True)
        logits = model(images)
    assert tokens.shape == (3, 1, 64)  # the class token's row alone
    torch.testing.assert_close(logits, reference(model, images), rtol=0, atol=1e-5)


def test_class_token_only_last_layer_gives_the_same_gradients():
    model = tiny_model().train()
    images = torch.randn(2, 3, 32, 32)
    model(images).square().sum().backward()
    fast = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    model.forward_head(model.forward_features(images)).square().sum().backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(fast[name], param.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_gap_model_still_encodes_every_token():
    model = tiny_model(pool="gap")
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(images), reference(model, images), rtol=0, atol=1e-6)


def test_written_out_attention_equals_fused_kernel_in_fp32():
    q, k, v = torch.randn(3, 2, 4, 17, 16).unbind(0)
    bias = torch.randn(4, 17, 17)
    out, weights = softmax_attention(q, k, v, 16**-0.5, bias)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=bias), rtol=0, atol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 17))
