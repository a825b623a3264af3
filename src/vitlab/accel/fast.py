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
  batch size and for oneDNN at a dynamic one; a new batch size then needs no recompilation either;
- on CPU, with Inductor's C++ wrapper: the generated graph calls its ~100 kernels from C++ rather
  than Python, which is faster and takes longer to compile;
- with the model's modules swapped for vitlab's CPU paths (layers.accelerate), which under the
  compiler give Inductor the patch embedding as a GEMM.

int8 (CPU): `optimize_for_inference(model, dtype=torch.int8)` runs the encoder's linear layers in
oneDNN's int8 kernels (int8.py: int8 weights per channel, activations quantized per tensor on
each call) and the rest of the model in bf16 where this CPU runs bf16 natively (kernels.native),
else in fp32; the choice is logged. torch's own int8 path (torch.ao.quantization) warns on torch
2.14 that it is deprecated, so it is not used. `make bench-int8` measures this path against the fp32
and bf16 ones and against onnxruntime's int8 (`vitlab export --quantize int8`), and its top-1 on
the digits demo model (docs/benchmarks.md).
"""

from __future__ import annotations

import copy
import logging

import torch
from torch import nn

from vitlab.errors import ConfigError

from . import kernels
from .int8 import cast_float_tensors, quantize_linears
from .layers import accelerate

log = logging.getLogger("vitlab")


def int8_companion_dtype() -> torch.dtype:
    """What an int8 model computes in outside its linears: bf16 where native here, else fp32."""
    dtype = torch.bfloat16 if kernels.native(torch.bfloat16) else torch.float32
    log.info(
        "int8: the encoder's linears in int8 (oneDNN), the rest in %s (CPU %s, bf16 %s)",
        kernels.dtype_name(dtype),
        kernels.cpu_capability(),
        "native" if dtype == torch.bfloat16 else "not native",
    )
    return dtype


class InferenceModel(nn.Module):
    def __init__(self, model: nn.Module, dtype: torch.dtype = torch.float32, compile: bool = True) -> None:
        super().__init__()
        on_cpu = all(p.device.type == "cpu" for p in model.parameters())
        int8 = dtype == torch.int8
        if int8 and not on_cpu:
            raise ConfigError("int8 inference runs on the CPU (oneDNN's int8 kernels); move the model to the CPU")
        self.dtype = int8_companion_dtype() if int8 else dtype
        self.model = accelerate(copy.deepcopy(model).eval(), self.dtype)
        if int8:
            cast_float_tensors(quantize_linears(self.model), self.dtype)
        else:
            self.model.to(self.dtype)
        for param in self.model.parameters():
            param.requires_grad_(False)
        self.network = torch.compile(self.model) if compile else self.model
        self.dynamic_batch = compile and on_cpu and self.dtype == torch.float32 and kernels.fp32_gemm() == "onednn"
        self.cpp_wrapper = on_cpu

    def forward(self, images: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        # Inductor reads `freezing` and `cpp_wrapper` when it compiles: at the first call and at any
        # recompilation (a new batch size). Passed as torch.compile(options=...) instead, freezing is
        # not applied.
        options = {"freezing": True, "cpp_wrapper": self.cpp_wrapper}
        with torch.inference_mode(), torch._inductor.config.patch(options):
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
    """A frozen, compiled copy of `model` computing in `dtype` (torch.int8: see the module's docstring);
    later changes to `model` do not reach it."""
    return InferenceModel(model, dtype, compile)
