"""One pre-norm Transformer encoder layer (paper Eq. 2-3).

z' = MSA(LN(z)) + z
z  = MLP(LN(z')) + z'
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import Attention


class QuickGELU(nn.Module):
    """x sigmoid(1.702 x), the GELU approximation OpenAI's CLIP image towers were trained with."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


def make_activation(name: str) -> nn.Module:
    # Flax's nn.gelu (vit_jax) is the tanh approximation; timm, torchvision and HF use exact erf.
    if name in ("quick_gelu", "silu"):
        return QuickGELU() if name == "quick_gelu" else nn.SiLU()
    return nn.GELU(approximate="tanh" if name == "gelu_tanh" else "none")


class Mlp(nn.Module):
    """Dense(mlp_dim) -> GELU -> Dense(D), dropout after each dense layer (Appendix B.1)."""

    def __init__(self, dim: int, hidden: int, act: str = "gelu", dropout: float = 0.0, out_act: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = make_activation(act)
        self.drop1 = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, dim)
        # The Keras example's MLP is Dense(gelu) -> Dense(gelu): an activation after fc2 as well.
        self.out_act = make_activation(act) if out_act else nn.Identity()
        self.drop2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.finish(self.act(self.fc1(x)))

    def finish(self, hidden: torch.Tensor) -> torch.Tensor:
        """Everything after fc1's activation: dropout, fc2, the optional activation, dropout."""
        return self.drop2(self.out_act(self.fc2(self.drop1(hidden))))


class GatedMlp(Mlp):
    """A gated linear unit (Shazeer 2020): fc1 gives a gate and a value, act(gate) * value goes on to
    fc2; with SiLU it is SwiGLU, as DINOv2-giant's MLP (timm's SwiGLUPacked: the gate first)."""

    def __init__(self, dim: int, hidden: int, act: str = "silu", dropout: float = 0.0, out_act: bool = False) -> None:
        super().__init__(dim, hidden, act, dropout, out_act)
        self.fc1 = nn.Linear(dim, 2 * hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = self.fc1(x).chunk(2, dim=-1)
        return self.finish(self.act(gate) * value)


class DropPath(nn.Module):
    """Stochastic depth: drop a whole residual branch per sample, scaling survivors by 1/keep."""

    def __init__(self, prob: float = 0.0) -> None:
        super().__init__()
        self.prob = prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.prob == 0.0:
            return x
        keep = 1.0 - self.prob
        mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)
        return x * mask / keep

    def extra_repr(self) -> str:
        return f"prob={self.prob}"


class LayerScale(nn.Module):
    """A learned per-channel gain on a residual branch (CaiT's layer scale), as timm's LayerScale."""

    def __init__(self, dim: int, init_values: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init_values)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class EncoderBlock(nn.Module):
    """LN -> MSA -> residual, LN -> MLP -> residual. Like timm's Block, it takes keywords, and its
    parts are arguments (`norm_layer`, `attn_layer`, `mlp_layer`), so that a variant of one part (a
    norm, an attention with its own extras) is one argument, not a new block."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        mlp_dim: int,
        head_dim: int | None = None,
        qkv_bias: bool = True,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        proj_dropout: bool = True,
        drop_path: float = 0.0,
        act: str = "gelu",
        mlp_out_act: bool = False,
        norm_eps: float = 1e-6,
        init_values: float | None = None,
        qk_norm: bool = False,
        norm_layer: type[nn.Module] = nn.LayerNorm,
        attn_layer: type[Attention] = Attention,
        mlp_layer: type[Mlp] = Mlp,
    ) -> None:
        super().__init__()
        self.norm1 = norm_layer(dim, eps=norm_eps)
        self.attn = attn_layer(
            dim, num_heads, head_dim, qkv_bias, attn_dropout, dropout if proj_dropout else 0.0, qk_norm, norm_eps
        )
        self.ls1 = LayerScale(dim, init_values) if init_values is not None else nn.Identity()
        self.norm2 = norm_layer(dim, eps=norm_eps)
        self.mlp = mlp_layer(dim, mlp_dim, act, dropout, mlp_out_act)
        self.ls2 = LayerScale(dim, init_values) if init_values is not None else nn.Identity()
        self.drop_path = DropPath(drop_path)

    def forward(
        self,
        z: torch.Tensor,
        attn_bias: torch.Tensor | None = None,
        need_weights: bool = False,
        num_queries: int | None = None,
        relative: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """z (B, T, D) -> (B, T, D), or only the first `num_queries` tokens' rows (B, Q, D)."""
        attended, weights = self.attn(self.norm1(z), attn_bias, need_weights, num_queries, relative)
        if num_queries is not None:
            z = z[:, :num_queries]
        z = z + self.drop_path(self.ls1(attended))  # Eq. 2
        z = z + self.drop_path(self.ls2(self.mlp(self.norm2(z))))  # Eq. 3
        return z, weights
