"""A fast inference path that computes the model's numbers with fewer passes over memory.

    fast = vitlab.optimize_for_inference(model, dtype=torch.bfloat16)
    logits = fast(images)  # float32 logits, no autograd

It runs a snapshot of the model:
- in evaluation mode under torch.inference_mode (no autograd bookkeeping);
- for bf16 / fp16, with the weights cast once, rather than autocast casting every weight and every
  LayerNorm output again on each call;
- compiled with Inductor's freezing: the weights become constants, so they are folded and prepacked
  on CPU, and LayerNorm, GELU and the residual adds are fused with their neighbours;
- in fp32 on CPU, with the batch dimension dynamic where oneDNN's fp32 GEMMs are the faster here
  (kernels.fp32_gemm, measured once per machine): Inductor prepacks fp32 weights for MKL at a fixed
  batch size and for oneDNN at a dynamic one. On an AMD EPYC (AVX512, 2 threads) this took Ti/16
  from 62 to 126 images/s (batch 32) and S/16 from 21 to 42 (batch 16); a new batch size then needs
  no recompilation either.

No int8 option: torch's own int8 path (torch.ao.quantization.quantize_dynamic) warns on torch 2.14
"torch.ao.quantization is deprecated and will be removed" (its successor, torchao, is not a
dependency). For int8 on CPU, export to ONNX with `vitlab export --quantize int8` instead, whose
speed against this path `make bench-int8` measures (docs/benchmarks.md).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from . import kernels


class InferenceModel(nn.Module):
    def __init__(self, model: nn.Module, dtype: torch.dtype = torch.float32, compile: bool = True) -> None:
        super().__init__()
        self.dtype = dtype
        self.model = copy.deepcopy(model).eval().to(dtype)
        for param in self.model.parameters():
            param.requires_grad_(False)
        self.network = torch.compile(self.model) if compile else self.model
        on_cpu = all(p.device.type == "cpu" for p in self.model.parameters())
        self.dynamic_batch = compile and on_cpu and dtype == torch.float32 and kernels.fp32_gemm() == "onednn"

    def forward(self, images: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        # Inductor reads `freezing` when it compiles: at the first call and at any recompilation (a new
        # batch size). Passed as torch.compile(options=...) instead, it is not applied.
        with torch.inference_mode(), torch._inductor.config.patch(freezing=True):
            images = images.to(self.dtype)
            if self.dynamic_batch:
                images = images.detach()  # marked, not the caller's tensor
                torch._dynamo.maybe_mark_dynamic(images, 0)
            output = self.network(images)
            # a module may return several tensors (logits and features): each comes back as float32
            return tuple(t.float() for t in output) if isinstance(output, tuple) else output.float()


def optimize_for_inference(
    model: nn.Module, dtype: torch.dtype = torch.float32, compile: bool = True
) -> InferenceModel:
    """A frozen, compiled copy of `model` computing in `dtype`; later changes to `model` do not reach it."""
    return InferenceModel(model, dtype, compile)
