"""Helpers shared by the weights and parity tests: inputs, comparison, peer checkpoints on disk."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

from conftest import TEST_DATA, randomise_

VIT_JAX_FIXTURE = TEST_DATA / "vit_jax"
TOLERANCE = dict(rtol=1e-5, atol=1e-5)  # the bar for fp32 logits


def images(height: int = 32, width: int | None = None, batch: int = 2, channels: int = 3) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7)
    return torch.randn(batch, channels, height, width or height, generator=generator)


def random_eval(module: torch.nn.Module) -> torch.nn.Module:
    """Random values in every parameter (zero-initialised heads would hide mistakes), eval mode."""
    return randomise_(module).eval()


def save_state_dict(module: torch.nn.Module, path: Path) -> Path:
    """A peer's state dict as the peer's users store it: .safetensors, or a .pth pickle."""
    state = {key: value.detach().contiguous() for key, value in module.state_dict().items()}
    if path.suffix == ".safetensors":
        save_file(state, str(path))
    else:
        torch.save(state, path)
    return path


@torch.no_grad()
def assert_same_outputs(ours: torch.nn.Module, peer_output: torch.Tensor, x: torch.Tensor) -> None:
    torch.testing.assert_close(ours(x), peer_output, **TOLERANCE)
