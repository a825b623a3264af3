"""Attention as two batched matmuls around a softmax, a block of queries at a time: where the fused
CPU kernel is the slower (kernels.attention_path measures it), what layers.FastAttention runs.

In training and under the compilers a block of QUERY_BLOCK query rows keeps its (B, heads, rows, T)
weights in cache and fewer weights alive at once; eager bf16 / fp16 inference (inference_attention)
takes blocks of whole images sized to the L2 caches, the scale in the GEMM's epilogue and the
softmax in place.
"""

from __future__ import annotations

import torch

from vitlab.model.attention import softmax_attention, softmax_in_fp32

from .cpu import l2_cache_bytes
from .kernels import HALF, eager_cpu, eager_cpu_inference
from .softmax import softmax_

# Query rows per block of the matmul path in training and under the compilers: blocks of about 100
# rows ran fastest at Ti/16's 197 tokens.
QUERY_BLOCK = 100

# Query rows per block in eager bf16 / fp16 CPU inference (inference_attention), where no autograd
# keeps the weights alive: whole rows of 197 tokens ran faster than halves, and 577 likewise.
INFERENCE_QUERY_BLOCK = 200


def cpu_softmax(logits: torch.Tensor) -> torch.Tensor:
    """The attention softmax; for bf16 / fp16 eager on the CPU, ATen's kernel, which computes in fp32
    and rounds once as softmax_in_fp32 does (within one ulp of it) but without the fp32 tensor, and
    whose backward is faster for it."""
    if logits.dtype in HALF and eager_cpu(logits):
        return logits.softmax(dim=-1)
    return softmax_in_fp32(logits)


def images_per_block(heads: int, rows: int, keys: int, itemsize: int) -> int:
    """How many images' logits (heads x rows x keys each) inference_attention computes at once: as
    many as fit in the L2 caches of the threads that share them (cpu.l2_cache_bytes), at least one;
    their logits then stay in cache between the three passes over them."""
    per_image = heads * rows * keys * itemsize
    return max(1, l2_cache_bytes() * torch.get_num_threads() // per_image)


def inference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """blocked_attention with nothing to differentiate: the scale in the GEMM's epilogue (baddbmm's
    alpha, on the fp32 accumulator) rather than a pass over q, the softmax in place over the logits
    (one tensor per block, not two), each block's output written into a (B, T, heads, head_dim)
    tensor, so the caller's merge of the heads is a view, not a copy, and blocks of whole images
    (images_per_block). (B, heads, Q, head_dim) like blocked_attention."""
    batch, heads, queries, _ = q.shape
    rows = min(queries, INFERENCE_QUERY_BLOCK)
    images = images_per_block(heads, rows, k.shape[2], q.element_size())
    out = q.new_empty(batch, queries, heads, v.shape[-1])
    unused = q.new_empty(())  # baddbmm's input, ignored where beta = 0
    for first in range(0, batch, images):
        part = slice(first, first + images)
        keys = k[part].flatten(0, 1).transpose(1, 2)  # (images * heads, head_dim, T)
        values = v[part].flatten(0, 1)  # (images * heads, T, head_dim)
        part_bias = bias[part] if bias is not None and bias.dim() == 4 and bias.shape[0] > 1 else bias
        for start in range(0, queries, rows):
            block = slice(start, start + rows)
            logits = torch.baddbmm(unused, q[part, :, block].flatten(0, 1), keys, beta=0, alpha=scale)
            if part_bias is not None:
                logits.view(-1, heads, *logits.shape[1:]).add_(part_bias[..., block, :])
            softmax_(logits)  # in fp32 inside, like softmax_attention's; softmax.py says whose kernel
            out[part, block] = torch.bmm(logits, values).unflatten(0, (-1, heads)).transpose(1, 2)
    return out.transpose(1, 2)


def blocked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    bias: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """softmax_attention one block of QUERY_BLOCK queries at a time (each query's row is independent);
    inference_attention in eager bf16 / fp16 CPU inference."""
    if q.dtype in HALF and dropout_p == 0.0 and eager_cpu_inference(q):
        return inference_attention(q, k, v, scale, bias)
    k, v = k.contiguous(), v.contiguous()  # once: views of qkv's output would be copied for every block
    blocks = []
    for start in range(0, q.shape[2], QUERY_BLOCK):
        rows = slice(start, start + QUERY_BLOCK)
        block_bias = bias[..., rows, :] if bias is not None else None
        blocks.append(softmax_attention(q[:, :, rows], k, v, scale, block_bias, dropout_p, cpu_softmax)[0])
    return torch.cat(blocks, dim=2)
