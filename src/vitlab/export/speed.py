"""CPU inference time of PyTorch and onnxruntime on the same model and inputs, side by side."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn

from vitlab.accel import accelerate
from vitlab.evaluate.predict import model_config

from .validate import sample_images


@dataclass
class SpeedComparison:
    batch: int
    torch_ms: float  # median per batch
    onnx_ms: float
    threads: int  # intra-op threads of each runtime

    def __str__(self) -> str:
        return (
            f"CPU inference, batch {self.batch}, {self.threads} thread(s) each, median of interleaved rounds: "
            f"PyTorch {self.torch_ms:.1f} ms, onnxruntime {self.onnx_ms:.1f} ms ({self.torch_ms / self.onnx_ms:.2f}x)"
        )


@torch.no_grad()
def _milliseconds(model: nn.Module, images: torch.Tensor) -> float:
    start = time.perf_counter()
    model(images)
    return (time.perf_counter() - start) * 1e3


def compare_speed(
    torch_model: nn.Module, onnx_model: nn.Module, batch: int, rounds: int = 10, warmup: int = 2
) -> SpeedComparison:
    """Time both on one batch, alternating every round so that machine load hits both alike.

    Give both the same intra-op thread count (torch.set_num_threads, OnnxModel(threads=)).
    """
    config = model_config(torch_model)
    images = sample_images(batch, config.in_channels, config.image_size)
    accelerate(torch_model.eval())  # PyTorch with vitlab's CPU paths, as vitlab's commands run it
    for _ in range(warmup):
        _milliseconds(torch_model, images)
        _milliseconds(onnx_model, images)
    torch_times, onnx_times = [], []
    for _ in range(rounds):
        torch_times.append(_milliseconds(torch_model, images))
        onnx_times.append(_milliseconds(onnx_model, images))
    return SpeedComparison(
        batch, statistics.median(torch_times), statistics.median(onnx_times), torch.get_num_threads()
    )
