"""Tiny training runs for the train and CLI tests: a one-layer ViT (width 32) on 8 px digits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from vitlab.train import TrainConfig, get_recipe
from vitlab.train.config import apply_mapping

TINY: dict[str, dict[str, Any]] = {
    "model": {"variant": "mu/4", "image_size": 8},
    "data": {"source": "digits", "batch_size": 32},
    "schedule": {"steps": 20, "warmup_steps": 5},
    "run": {"eval_every": 10, "threads": 1, "log_every": 10},
}

# The same as command-line flags, for tests that go through `vitlab train`.
TINY_FLAGS = ["--recipe", "small-data", "--model", "mu/4", "--image-size", "8", "--data", "digits",
              "--batch-size", "32", "--steps", "20", "--eval-every", "10", "--threads", "1",
              "--set", "schedule.warmup_steps=5"]


def tiny_config(out: Path, recipe: str = "small-data", **sections: dict[str, Any]) -> TrainConfig:
    """`recipe` (small-data: AdamW, RandAugment, Mixup/CutMix, drop path) shrunk to run in about a second."""
    config = apply_mapping(get_recipe(recipe), TINY, "tiny")
    config = apply_mapping(config, sections, "test")
    config.run.out = str(out)
    return config


def state_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def assert_bitwise_equal(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> None:
    assert first.keys() == second.keys()
    different = [name for name in first if not torch.equal(first[name], second[name])]
    assert not different, f"tensors differ: {different[:5]}"
