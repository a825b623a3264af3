"""big_vision ViT checkpoints (models/vit.py), both poolings, plain and scanned blocks: npz files
written in that layout from random weights against an independent NumPy forward pass of it."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

import vitlab
from helpers import TOLERANCE

pytestmark = pytest.mark.unit

WIDTH, HEADS, MLP, DEPTH, PATCH, IMAGE, CLASSES = 32, 4, 64, 2, 8, (32, 24), 5
BLOCK = ("LayerNorm_0", "MultiHeadDotProductAttention_0", "LayerNorm_1", "MlpBlock_0")  # current Flax names


def random_params(pool: str, seed: int = 0) -> dict[str, np.ndarray]:
    """big_vision's parameter tree (flattened with '/'), one array per block and layer."""
    rng = np.random.default_rng(seed)

    def r(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    grid = IMAGE[0] // PATCH * (IMAGE[1] // PATCH)
    head_dim = WIDTH // HEADS
    params = {
        "embedding/kernel": r(PATCH, PATCH, 3, WIDTH),
        "embedding/bias": r(WIDTH),
        "pos_embedding": r(1, grid, WIDTH),  # over the patches only, in both poolings
        "Transformer/encoder_norm/scale": 1 + r(WIDTH),
        "Transformer/encoder_norm/bias": r(WIDTH),
        "head/kernel": r(WIDTH, CLASSES),
        "head/bias": r(CLASSES),
    }
    if pool == "tok":
        params["cls"] = r(1, 1, WIDTH)
    for layer in range(DEPTH):
        block = f"Transformer/encoderblock_{layer}/"
        norm1, attn, norm2, mlp = BLOCK
        for norm in (norm1, norm2):
            params[f"{block}{norm}/scale"], params[f"{block}{norm}/bias"] = 1 + r(WIDTH), r(WIDTH)
        for part in ("query", "key", "value"):
            params[f"{block}{attn}/{part}/kernel"] = r(WIDTH, HEADS, head_dim)
            params[f"{block}{attn}/{part}/bias"] = r(HEADS, head_dim)
        params[f"{block}{attn}/out/kernel"], params[f"{block}{attn}/out/bias"] = r(HEADS, head_dim, WIDTH), r(WIDTH)
        params[f"{block}{mlp}/Dense_0/kernel"], params[f"{block}{mlp}/Dense_0/bias"] = r(WIDTH, MLP), r(MLP)
        params[f"{block}{mlp}/Dense_1/kernel"], params[f"{block}{mlp}/Dense_1/bias"] = r(MLP, WIDTH), r(WIDTH)
    return params


def scanned(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """scan=True: one Transformer/encoderblock whose arrays stack the layers on a leading axis."""
    out = {k: v for k, v in params.items() if not k.startswith("Transformer/encoderblock_")}
    rests = {k.split("/", 2)[2] for k in params if k.startswith("Transformer/encoderblock_0/")}
    for rest in rests:
        out[f"Transformer/encoderblock/{rest}"] = np.stack(
            [params[f"Transformer/encoderblock_{layer}/{rest}"] for layer in range(DEPTH)]
        )
    return out


def layer_norm(x, scale, bias):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-6) * scale + bias


def reference_logits(params: dict[str, np.ndarray], images_nhwc: np.ndarray, pool: str) -> np.ndarray:
    """big_vision's _Model.__call__ (train=False) in float64 NumPy, read off the Flax tree."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    n, height, width, channels = images_nhwc.shape
    h, w = height // PATCH, width // PATCH
    patches = images_nhwc.reshape(n, h, PATCH, w, PATCH, channels).transpose(0, 1, 3, 2, 4, 5)
    x = np.einsum("nhwpqc,pqcd->nhwd", patches, p["embedding/kernel"]).reshape(n, h * w, WIDTH)
    x = x + p["embedding/bias"] + p["pos_embedding"]  # E_pos before the class token
    if pool == "tok":
        x = np.concatenate([np.repeat(p["cls"], n, axis=0), x], axis=1)
    norm1, attn, norm2, mlp = BLOCK
    for layer in range(DEPTH):
        b = f"Transformer/encoderblock_{layer}/"
        y = layer_norm(x, p[f"{b}{norm1}/scale"], p[f"{b}{norm1}/bias"])
        q, k, v = (
            np.einsum("nld,dhk->nlhk", y, p[f"{b}{attn}/{part}/kernel"]) + p[f"{b}{attn}/{part}/bias"]
            for part in ("query", "key", "value")
        )
        logits = np.einsum("nqhk,nshk->nhqs", q, k) / np.sqrt(q.shape[-1])
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        y = np.einsum("nhqs,nshk->nqhk", weights, v)
        x = x + np.einsum("nqhk,hkd->nqd", y, p[f"{b}{attn}/out/kernel"]) + p[f"{b}{attn}/out/bias"]
        y = layer_norm(x, p[f"{b}{norm2}/scale"], p[f"{b}{norm2}/bias"])
        y = y @ p[f"{b}{mlp}/Dense_0/kernel"] + p[f"{b}{mlp}/Dense_0/bias"]
        y = 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))  # flax nn.gelu: tanh
        x = x + y @ p[f"{b}{mlp}/Dense_1/kernel"] + p[f"{b}{mlp}/Dense_1/bias"]
    x = layer_norm(x, p["Transformer/encoder_norm/scale"], p["Transformer/encoder_norm/bias"])
    pooled = x[:, 0] if pool == "tok" else x.mean(axis=1)
    return pooled @ p["head/kernel"] + p["head/bias"]


@pytest.mark.parametrize("layout", ["plain", "scanned"])
@pytest.mark.parametrize("pool", ["tok", "gap"])
def test_big_vision_checkpoint_gives_its_logits(tmp_path, pool, layout):
    params = random_params(pool)
    stored = scanned(params) if layout == "scanned" else params
    path = tmp_path / "bv.npz"
    np.savez(path, **{f"params/{key}": value for key, value in stored.items()})
    model = vitlab.load(path, image_size=IMAGE)  # a non-square grid: the flat table does not record it
    config = model.config
    assert (config.pool, config.depth, config.num_heads, config.image_size) == (
        "token" if pool == "tok" else "gap",
        DEPTH,
        HEADS,
        IMAGE,
    )
    images_nhwc = np.random.default_rng(1).standard_normal((2, *IMAGE, 3)).astype(np.float32)
    expected = reference_logits(params, images_nhwc, pool)
    with torch.no_grad():
        logits = model(torch.from_numpy(images_nhwc.transpose(0, 3, 1, 2).copy()))
    torch.testing.assert_close(logits.double(), torch.from_numpy(expected), **TOLERANCE)
    assert np.abs(expected).max() > 1e-1


@pytest.mark.parametrize("pool", ["tok", "gap"])
def test_square_checkpoint_needs_no_image_size(tmp_path, pool):
    params = random_params(pool)
    params["pos_embedding"] = np.random.default_rng(2).standard_normal((1, 16, WIDTH)).astype(np.float32)  # 4x4
    path = tmp_path / "bv.npz"
    np.savez(path, **{f"params/{key}": value for key, value in scanned(params).items()})
    model = vitlab.load(path)
    assert model.config.image_size == (32, 32)
    if pool == "tok":
        assert torch.count_nonzero(model.pos_embed.weight[:, 0]) == 0  # the class token has no E_pos
    images_nhwc = np.random.default_rng(3).standard_normal((2, 32, 32, 3)).astype(np.float32)
    with torch.no_grad():
        logits = model(torch.from_numpy(images_nhwc.transpose(0, 3, 1, 2).copy()))
    torch.testing.assert_close(
        logits.double(), torch.from_numpy(reference_logits(params, images_nhwc, pool)), **TOLERANCE
    )


@pytest.mark.parametrize("pool", ["tok", "gap"])
def test_pooling_read_from_absent_class_token_is_said(tmp_path, pool, caplog):
    """A file without `cls` does not record its pooling: reading it as GAP is said, never silent."""
    path = tmp_path / "bv.npz"
    np.savez(path, **{f"params/{key}": value for key, value in random_params(pool).items()})
    with caplog.at_level(logging.INFO, logger="vitlab"):
        vitlab.load(path, image_size=IMAGE)
    said = "read as global average pooling" in caplog.text
    assert said == (pool == "gap"), caplog.text
