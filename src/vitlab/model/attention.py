"""Multi-head self-attention (paper Appendix A, Eq. 5-8) with a fused qkv projection.

Two paths compute the same thing: PyTorch's fused scaled_dot_product_attention, and the softmax
written out, which also returns the attention weights for analysis. Each runs where it is faster.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .cpu import l2_cache_bytes
from .kernels import HALF, Linear, attention_path, eager_cpu, eager_cpu_inference
from .softmax import softmax_


def softmax_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    bias: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 5-7 written out: softmax(q k^T * scale + bias) v and the weights (B, heads, Q, T)."""
    logits = (q * scale) @ k.transpose(-2, -1)  # (B, heads, Q, T)
    if bias is not None:
        logits = logits + bias
    if logits.dtype in HALF and eager_cpu(logits):
        # ATen's CPU softmax computes a bf16 / fp16 input in fp32 and rounds once, as below but
        # without the fp32 tensor (bf16: within one ulp of it, 25 of 1.9M weights differing); its
        # backward, in fp32 inside from the bf16 weights, errs by about one bf16 rounding of the
        # gradient (S/16's shapes: mean 6.7e-6 against 4.7e-6 for the fp32 tensor's, on gradients of
        # 3.3e-3). Eager bf16 training steps: S/16 5%, Ti/16 7% faster.
        weights = logits.softmax(dim=-1)
    else:
        # The softmax in at least fp32: in bf16 the small weights would round away.
        weights = logits.softmax(dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32)).to(q.dtype)
    return F.dropout(weights, dropout_p, training=dropout_p > 0) @ v, weights


def relative_attention_logits(q: torch.Tensor, offsets: torch.Tensor, scale: float, num_keys: int) -> torch.Tensor:
    """q (B, heads, Q, hd) against offset embeddings (2T - 1, hd) -> (B, heads, Q, T) logits for each
    query i and key j, read at offset i - j (Appendix D.4)."""
    per_offset = (q * scale) @ offsets.to(q.dtype).t()  # (B, heads, Q, 2T - 1)
    queries = torch.arange(q.shape[2], device=q.device)
    keys = torch.arange(num_keys, device=q.device)
    index = queries[:, None] - keys[None, :] + (offsets.shape[0] - 1) // 2  # (Q, T), in [0, 2T - 2]
    return per_offset.gather(-1, index.expand(*per_offset.shape[:2], -1, -1))


# Query rows per block of the matmul path in training and under the compilers (eager inference:
# INFERENCE_QUERY_BLOCK): a (B, heads, 100, T) block of weights stays in cache, and
# fewer weights are alive at once. For Ti/16 (T = 197) in bf16, blocks of 80-100 rows ran fastest of
# 16 to all 197, and took 23 MiB at batch 32 against 30 MiB unblocked.
QUERY_BLOCK = 100


# Query rows per block in eager bf16 / fp16 CPU inference (inference_attention), where no autograd
# keeps the weights alive: S/16 at batch 16, bf16, 2 threads, blocks of 197 rows ran 3.3 ms per
# layer against 3.4-3.7 ms for 100 and 3.6-3.8 ms for 50; at 384 px (T = 577) 11.7 ms against 12.2-12.7
# and 13.6-15.1 ms.
INFERENCE_QUERY_BLOCK = 200


def images_per_block(heads: int, rows: int, keys: int, itemsize: int) -> int:
    """How many images' logits (heads x rows x keys each) inference_attention computes at once: as
    many as fit in the L2 caches of the threads that share them (cpu.l2_cache_bytes), at least one.
    In the whole S/16 model (batch 16, bf16, 2 threads, 1 MiB of L2 each; 12 interleaved runs of 20
    forwards), 4 images' 1.9 MB of logits took 48-58 ms of attention per forward where all 16 at
    once (7.4 MB) took 45-83 ms; B/16 at batch 8, 2 images at once: 52-56 ms against 53-81 ms."""
    per_image = heads * rows * keys * itemsize
    return max(1, l2_cache_bytes() * torch.get_num_threads() // per_image)


def inference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """blocked_attention with nothing to differentiate: the scale in the GEMM's epilogue (baddbmm's
    alpha, on the fp32 accumulator) rather than a pass over q, the softmax in place over the logits
    (one tensor per block, not two), each block's output written into a (B, T, heads, head_dim)
    tensor, so the caller's merge of the heads is a view, not a copy, and blocks of whole images
    (images_per_block) whose logits stay in cache between the three passes over them.
    (B, heads, Q, head_dim) like blocked_attention."""
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
        blocks.append(softmax_attention(q[:, :, rows], k, v, scale, block_bias, dropout_p)[0])
    return torch.cat(blocks, dim=2)


def matmul_attention_is_faster(q: torch.Tensor) -> bool:
    """On a CPU with native bf16, two batched matmuls around a softmax ran 2-4x faster than PyTorch's
    fused CPU attention kernel at ViT sequence lengths (docs/benchmarks.md); in fp32, on GPUs and where
    bf16 is emulated the fused kernel is as fast or faster. kernels.attention_path decides.

    At 384 px (T = 577 for /16) the choice is the same as at 197 tokens: bf16, 2 threads, head dim 64,
    forward of 4 x 12 heads 13-17 ms against the fused kernel's 27 ms (8 x 6 heads: 37-57 ms
    against 27-47 ms, runs disagreeing); forward + backward with recomputation 67-87 ms against 88-90 ms;
    the whole S/16 fast path at batch 8, interleaved, 6.27 s against 6.30 s per batch (load 14).
    The whole model ties, so the choice does not depend on the sequence length."""
    return attention_path(q.dtype, q.device, blocked_attention) == "matmul"


class Attention(nn.Module):
    def __init__(
        self,
        dim: int,
        num_heads: int,
        head_dim: int | None = None,
        qkv_bias: bool = True,
        attn_dropout: float = 0.0,
        proj_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim or dim // num_heads
        inner = self.num_heads * self.head_dim
        self.scale = self.head_dim**-0.5
        self.qkv = Linear(dim, 3 * inner, bias=qkv_bias)  # U_qkv of Eq. 5, all heads at once
        self.attn_dropout = attn_dropout
        self.proj = Linear(inner, dim)  # U_msa of Eq. 8
        self.proj_drop = nn.Dropout(proj_dropout)

    def forward(
        self,
        x: torch.Tensor,
        bias: torch.Tensor | None = None,
        need_weights: bool = False,
        num_queries: int | None = None,
        relative: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, T, D), bias (heads, T, T) or None -> (B, Q, D) and, if asked, weights (B, heads, Q, T).

        Q = T, or the first `num_queries` tokens when only their outputs are wanted (all T are keys).
        relative: offset embeddings (2T - 1, head_dim) of the paper's relative attention (Appendix
        D.4), whose query-dependent logits join the bias; both paths below see the same logits.
        """
        batch, tokens, _ = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, heads, T, head_dim)
        if num_queries is not None:
            q = q[:, :, :num_queries]  # (B, heads, Q, head_dim)
            bias = bias[:, :num_queries] if bias is not None else None
        if relative is not None:
            logits = relative_attention_logits(q, relative, self.scale, tokens)  # (B, heads, Q, T)
            bias = logits if bias is None else bias.to(q.dtype) + logits
        dropout_p = self.attn_dropout if self.training else 0.0
        if bias is not None:
            bias = bias.to(q.dtype)
        weights = None
        if need_weights:
            out, weights = softmax_attention(q, k, v, self.scale, bias, dropout_p)
        elif not matmul_attention_is_faster(q):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p)
        elif torch.is_grad_enabled() and q.requires_grad:
            # Recompute the weights in backward rather than store them: the fused kernel's memory.
            out = checkpoint(blocked_attention, q, k, v, self.scale, bias, dropout_p, use_reentrant=False)
        else:
            out = blocked_attention(q, k, v, self.scale, bias, dropout_p)
        out = out.transpose(1, 2).reshape(batch, q.shape[2], self.num_heads * self.head_dim)
        return self.proj_drop(self.proj(out)), weights
