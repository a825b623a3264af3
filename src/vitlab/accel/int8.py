"""int8 linear layers for CPU inference: the encoder's four GEMMs per block in oneDNN's int8 kernels.

    y = dequant(quant(x) @ quant(W)^T) + b      (then GELU, for the MLP's first layer)

- Weights: symmetric int8 per output channel, scale_j = max_k |W_jk| / 127, taken from the fp32
  weights once.
- Activations: asymmetric uint8 per tensor, quantized on every call from the tensor's own range
  (dynamic quantization, as onnxruntime's quantize_dynamic does): scale = (max(x, 0) - min(x, 0)) / L,
  zero point = round(-min(x, 0) / scale), L = 255 levels. No calibration data is needed.
- Where oneDNN's int8 GEMM adds its u8 x s8 products in pairs into int16 with saturation (x86
  without VNNI or AMX: vpmaddubsw, oneDNN's "Nuances of int8 computations"), 255 x 127 x 2 overflows
  int16, so activations take 7 bits, L = 127 (PyTorch's `reduce_range` for the same reason).
  `activation_levels` asks the kernel itself, once, with the worst-case pair.
- The GEMM is oneDNN's qlinear (torch.ops.onednn.qlinear_pointwise): int8 products accumulated in
  int32, dequantized, bias added and, for fc1, GELU applied in the kernel's epilogue, written in the
  input's dtype. Under torch.compile with freezing, Inductor prepacks the int8 weights once and
  fuses the activation's range and quantization with the LayerNorm before it.

Only the encoder blocks' linears are quantized: the patch embedding, the head and attention's two
matmuls keep the model's float dtype, as in `vitlab export --quantize int8` (onnxruntime quantizes
its MatMuls only, not the head's Gemm or the patch embedding's Conv).
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from vitlab.errors import ConfigError
from vitlab.model.block import GatedMlp

log = logging.getLogger("vitlab")

UINT8_LEVELS = 255
REDUCED_LEVELS = 127  # 7-bit activations: a pair of products, 2 x 127 x 127, fits in int16
INT8_LEVELS = 127
GELU_ALGORITHMS = {"none": "none", "tanh": "tanh"}  # nn.GELU(approximate=...) -> oneDNN's gelu algorithm


_levels: list[int] = []  # [] before the first call; then the activation levels chosen


def activation_levels() -> int:
    """UINT8_LEVELS, or REDUCED_LEVELS where this CPU's int8 GEMM saturates (see the module docstring);
    decided once per process and logged."""
    if not _levels:
        saturates = pairs_saturate()
        _levels.append(REDUCED_LEVELS if saturates else UINT8_LEVELS)
        log.info(
            "int8: activations in %d levels (oneDNN's int8 GEMM here %s)",
            _levels[0],
            "saturates pairs of products in int16: 7 bits" if saturates else "accumulates in int32: 8 bits",
        )
    return _levels[0]


def pairs_saturate(columns: int = 64) -> bool:
    """Whether oneDNN's int8 GEMM here loses the sum of `columns` products 255 x 127: exactly
    representable in fp32, and clipped at 32767 per pair where pairs are summed in int16."""
    x = torch.full((1, columns), UINT8_LEVELS, dtype=torch.uint8)
    weight = torch.full((1, columns), INT8_LEVELS, dtype=torch.int8)
    out = torch.ops.onednn.qlinear_pointwise.tensor(
        x, torch.tensor(1.0), torch.tensor(0, dtype=torch.int32),
        torch.ops.onednn.qlinear_prepack(weight, None), torch.ones(1), torch.zeros(1, dtype=torch.int32), None,
        1.0, 0, torch.float32, "none", [], "",
    )  # fmt: skip
    return out.item() != columns * UINT8_LEVELS * INT8_LEVELS


def reset() -> None:
    """Forget the levels chosen (tests fake the kernel, then ask again)."""
    _levels.clear()


class Int8Linear(nn.Module):
    """`linear`'s weights in int8 per output channel; activations quantized to uint8 per tensor."""

    def __init__(self, linear: nn.Linear, gelu: nn.GELU | None = None) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp(min=torch.finfo(torch.float32).tiny) / INT8_LEVELS
        quantized = torch.round(weight / scale[:, None]).clamp(-INT8_LEVELS, INT8_LEVELS).to(torch.int8)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight", quantized)
        self.register_buffer("weight_scale", scale)
        self.register_buffer("weight_zero_point", torch.zeros(self.out_features, dtype=torch.int32))
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float())
        self.post_op, self.algorithm = ("gelu", GELU_ALGORITHMS[gelu.approximate]) if gelu else ("none", "")
        self.levels = activation_levels()
        self._packed: torch.Tensor | None = None  # eager calls' prepacked weight

    def packed_weight(self) -> torch.Tensor:
        if torch.compiler.is_compiling():  # a constant under freezing: Inductor packs it once
            return torch.ops.onednn.qlinear_prepack(self.weight, None)
        if self._packed is None:
            self._packed = torch.ops.onednn.qlinear_prepack(self.weight, None)
        return self._packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu":
            raise ConfigError(f"int8 linears run on the CPU (oneDNN), got an input on {x.device}")
        quantized, scale, zero_point = self.quantize(x)
        return torch.ops.onednn.qlinear_pointwise.tensor(
            quantized, scale, zero_point,
            self.packed_weight(), self.weight_scale, self.weight_zero_point, self.bias,
            1.0, 0, x.dtype,  # output scale and zero point unused: the output is float
            self.post_op, [], self.algorithm,
        )  # fmt: skip

    def quantize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x in uint8 over `levels` levels, its scale and zero point (see the module docstring)."""
        low = x.amin().float().clamp(max=0)
        high = x.amax().float().clamp(min=0)
        scale = ((high - low) / self.levels).clamp(min=torch.finfo(torch.float32).tiny)
        zero_point = torch.round(-low / scale).to(torch.int32)
        quantized = torch.clamp(torch.round(x.float() / scale) + zero_point, 0, self.levels).to(torch.uint8)
        return quantized, scale, zero_point

    def extra_repr(self) -> str:
        post = f", then {self.post_op} ({self.algorithm})" if self.post_op != "none" else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, int8, activations in {self.levels} levels{post}"


def quantize_linears(model: nn.Module) -> nn.Module:
    """Replace, in place, each encoder block's qkv, proj, fc1 (with its GELU) and fc2 by Int8Linear."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or len(blocks) == 0:
        raise ConfigError(f"int8: {type(model).__name__} has no encoder blocks to quantize (a ViT's `blocks`)")
    for index, block in enumerate(blocks):
        attention, mlp = getattr(block, "attn", None), getattr(block, "mlp", None)
        linears = [getattr(attention, "qkv", None), getattr(attention, "proj", None)]
        linears += [getattr(mlp, "fc1", None), getattr(mlp, "fc2", None)]
        if not all(isinstance(linear, nn.Linear) for linear in linears):
            raise ConfigError(
                f"int8: block {index} of {type(model).__name__} is not a ViT encoder block "
                "(attn.qkv, attn.proj, mlp.fc1, mlp.fc2 linears); int8 quantizes ViT encoders only"
            )
        assert attention is not None and mlp is not None
        attention.qkv = Int8Linear(attention.qkv)
        attention.proj = Int8Linear(attention.proj)
        if isinstance(mlp.act, nn.GELU) and not isinstance(mlp, GatedMlp):  # a gate's GELU is not fc1's epilogue
            mlp.fc1, mlp.act = Int8Linear(mlp.fc1, gelu=mlp.act), nn.Identity()
        else:
            mlp.fc1 = Int8Linear(mlp.fc1)
        mlp.fc2 = Int8Linear(mlp.fc2)
    return model


def cast_float_tensors(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """model.to(dtype), except Int8Linear's scales and bias, which stay fp32 as oneDNN reads them."""
    for module in model.modules():
        if isinstance(module, Int8Linear):
            continue
        for name, param in module._parameters.items():
            if param is not None and param.is_floating_point():
                module._parameters[name] = nn.Parameter(param.detach().to(dtype), requires_grad=False)
        for name, buffer in module._buffers.items():
            if buffer is not None and buffer.is_floating_point():
                module._buffers[name] = buffer.to(dtype)
    return model
