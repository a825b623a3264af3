"""Speed as a layer one opts into: `accelerate(model, dtype)` swaps the plain model's attention, MLP,
patch embedding and their linear maps for subclasses that add vitlab's CPU paths and no state, so
that the state dict, the parameters and the numbers' meaning stay the model's own (timm's
`use_fused_attn` switch is the idea, here per module rather than global).

Every choice between kernels is made in `prepare`, before any forward: timing the paths, building
vitlab's C kernel and writing the cache file happen there and nowhere else, so a forward of an
accelerated model, like one of the plain model, writes nothing and runs no compiler. What is not
prepared (another dtype, say) runs the plain path.
"""

from __future__ import annotations

from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from vitlab.model.attention import Attention, softmax_attention
from vitlab.model.block import Mlp
from vitlab.model.patch_embed import PatchEmbedding, patches

from . import kernels
from .blocked import blocked_attention, cpu_softmax
from .kernels import HALF, chosen_attention_path, compiled_cpu_inference, eager_onednn, native, onednn_linear, widened
from .softmax import choose_softmax


class Linear(nn.Linear):
    """nn.Linear (same parameters and state dict) through `widened`, or oneDNN (see eager_onednn)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if eager_onednn(x, self.weight):
            return onednn_linear(x, self.weight, self.bias)
        return widened(F.linear, x, self.weight, self.bias)

    def gelu(self, x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
        """F.gelu(self(x), approximate); in bf16 / fp16 where eager_onednn, GELU in oneDNN's epilogue
        (on the fp32 accumulator, before the output is rounded to x's dtype). In fp32 ATen's GELU: the
        epilogue's erf differs from it by more than the 1e-5 to which vitlab matches its peers."""
        if x.dtype in HALF and eager_onednn(x, self.weight):
            return onednn_linear(x, self.weight, self.bias, "gelu", approximate)
        return F.gelu(self(x), approximate=approximate)


class Conv2d(nn.Conv2d):
    """nn.Conv2d (same parameters and state dict) through `widened`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return widened(self._conv_forward, x, self.weight, self.bias)


def matmul_attention_is_faster(q: torch.Tensor) -> bool:
    """On a CPU with native bf16, two batched matmuls around a softmax can beat PyTorch's fused CPU
    attention kernel at ViT sequence lengths (docs/benchmarks.md); in fp32, on GPUs and where bf16 is
    emulated the fused kernel is as fast or faster. kernels.attention_path measured which, whatever
    the sequence length, since the whole model ties where the two differ by length."""
    return chosen_attention_path(q.dtype, q.device) == "matmul"


class FastAttention(Attention):
    """Attention that takes the blocked matmul path where that was measured faster."""

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, dropout_p: float
    ) -> torch.Tensor:
        if not matmul_attention_is_faster(q):
            return super().attend(q, k, v, bias, dropout_p)
        if torch.is_grad_enabled() and q.requires_grad:
            # Recompute the weights in backward rather than store them: the fused kernel's memory.
            return checkpoint(blocked_attention, q, k, v, self.scale, bias, dropout_p, use_reentrant=False)
        return blocked_attention(q, k, v, self.scale, bias, dropout_p)

    def attend_with_weights(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, dropout_p: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return softmax_attention(q, k, v, self.scale, bias, dropout_p, cpu_softmax)


class FastMlp(Mlp):
    """The MLP with fc1's GELU in oneDNN's epilogue where it runs (Linear.gelu): one pass fewer."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self.act, nn.GELU) and isinstance(self.fc1, Linear):
            return self.finish(self.fc1.gelu(x, self.act.approximate))
        return super().forward(x)


class FastPatchEmbedding(PatchEmbedding):
    """The patch embedding as one GEMM where the linear layers run through oneDNN (eager_onednn:
    eager inference on the CPU): the patches copied out (B, N, C P P) and multiplied by the kernel
    read as a (D, C P P) matrix, bias in the epilogue; oneDNN's convolution is slower at these shapes.
    Inductor's frozen bf16 / fp16 inference graphs on a CPU with native kernels (optimize_for_inference)
    take the same GEMM, with the weight prepacked; in fp32 they keep the convolution, which was not
    slower there."""

    def compiled_gemm(self, images: torch.Tensor) -> bool:
        """Whether Inductor, tracing bf16 / fp16 CPU inference, is given the GEMM (see the class)."""
        return (
            images.dtype in HALF
            and images.dtype == self.proj.weight.dtype
            and native(images.dtype)
            and compiled_cpu_inference(images)
        )

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        compiled = self.compiled_gemm(images)
        if not (compiled or eager_onednn(images, self.proj.weight)):
            return super().forward(images)
        if not compiled:
            self.check_input(images)
        grid = (images.shape[-2] // self.patch_size, images.shape[-1] // self.patch_size)
        flat = patches(images, self.patch_size).flatten(2)  # (B, N, C P P), the kernel's order
        linear = F.linear if compiled else onednn_linear  # Inductor packs its own
        return linear(flat, self.proj.weight.flatten(1), self.proj.bias), grid


# Each plain part, the subclass that replaces it, and the plain maps inside it that are replaced too.
FAST_PARTS: dict[type[nn.Module], type[nn.Module]] = {
    Attention: FastAttention,
    Mlp: FastMlp,
    PatchEmbedding: FastPatchEmbedding,
}
FAST_MAPS: dict[type[nn.Module], type[nn.Module]] = {nn.Linear: Linear, nn.Conv2d: Conv2d}


def as_subclass(module: nn.Module, subclass: type[nn.Module]) -> nn.Module:
    """A `subclass` of module's class holding the same parameters, buffers, children and settings
    (the subclass adds behaviour, no state); `module` itself is left as it was."""
    fast = subclass.__new__(subclass)
    fast.__dict__.update(module.__dict__)
    for table in ("_parameters", "_buffers", "_modules"):
        fast.__dict__[table] = dict(module.__dict__[table])  # its own tables: its children may be swapped
    return fast


def model_device(model: nn.Module) -> torch.device:
    return next((p.device for p in model.parameters()), torch.device("cpu"))


def prepare(dtype: torch.dtype, device: torch.device) -> None:
    """Make, once per process, the choices an accelerated model computing in `dtype` on `device`
    reads: the fp32 GEMM library; for bf16 / fp16, whether this CPU runs them natively, vitlab's
    softmax kernel and the attention path."""
    if device.type != "cpu":
        return
    if dtype == torch.float32:
        kernels.fp32_gemm()
    elif dtype in HALF and native(dtype):
        kernels.onednn_linear_runs(dtype)
        if dtype == torch.bfloat16:
            choose_softmax()  # the matmul path's softmax, before that path is timed
        kernels.attention_path(dtype, device, blocked_attention)


Model = TypeVar("Model", bound=nn.Module)


def accelerate(model: Model, dtype: torch.dtype = torch.float32) -> Model:
    """`model`, in place, with vitlab's CPU paths for computing in `dtype` (fp32, or bf16 / fp16 as
    weights or under autocast): its plain parts swapped for their fast subclasses (FAST_PARTS) and
    the kernel choices made (`prepare`). Parts of other classes are left alone; calling it again
    swaps nothing more and prepares `dtype` too."""
    prepare(dtype, model_device(model))
    swap_parts(model)
    return model


def swap_parts(module: nn.Module) -> None:
    """Below `module`, each plain part (FAST_PARTS) replaced by its fast subclass, and the plain
    linear maps directly inside it by theirs (FAST_MAPS)."""
    for name, child in module.named_children():
        fast = FAST_PARTS.get(type(child))
        if fast is not None:
            child = as_subclass(child, fast)
            for map_name, inner in child.named_children():
                fast_map = FAST_MAPS.get(type(inner))
                if fast_map is not None:
                    setattr(child, map_name, as_subclass(inner, fast_map))
            setattr(module, name, child)
        swap_parts(child)
