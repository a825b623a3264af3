"""Shared test helpers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO_ROOT.parent / "shared" / "fixtures"


@pytest.fixture(autouse=True)
def _seed_everything():
    torch.manual_seed(0)
    yield


def randomise_(module: torch.nn.Module, std: float = 0.2) -> torch.nn.Module:
    """Give every parameter random values so that every sub-layer (zero-initialised heads too) matters."""
    generator = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * std)
    return module
