"""One benchmark step for any implementation: an inference batch or a training step.

A Case fixes what is measured (variant, resolution, batch, dtype, task); a Mode says how one
implementation runs it:
- eager or compiled (torch.compile with default settings);
- for bf16 inference, either autocast over fp32 weights or the weights cast to bf16 ("bf16w");
- "fast": vitlab's own inference path, vitlab.optimize_for_inference ("vitlab-int8": with dtype torch.int8,
  in the fp32 case, its only mode).
onnxruntime (fp32 and int8, implementations.py) runs fp32 inference on the CPU in "eager" mode only;
OpenVINO fp32 and bf16 inference, compiled for the case's batch and dtype, in "eager" mode only.
Training is always bf16 autocast over fp32 weights (mixed precision) or plain fp32: forward,
cross-entropy, backward, AdamW step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vitlab.accel import accelerate, optimize_for_inference

from .implementations import FAST_DTYPES, ONNXRUNTIME, OPENVINO
from .openvino import OpenVinoModel

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
TASKS = ("infer", "train")


@dataclass(frozen=True)
class Case:
    variant: str
    image_size: int
    batch: int
    dtype: str  # fp32 | bf16
    task: str  # infer | train

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r} in case {self.label}; choose one of {', '.join(DTYPES)}")
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r} in case {self.label}; choose one of {', '.join(TASKS)}")
        if self.batch <= 0 or self.image_size <= 0:
            raise ValueError(f"batch and image size must be positive in case {self.label}")

    @property
    def label(self) -> str:
        return f"{self.variant}@{self.image_size} {self.task} {self.dtype} batch {self.batch}"

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


@dataclass(frozen=True)
class Mode:
    compiled: bool = False
    bf16_weights: bool = False  # bf16 inference with the weights cast, instead of autocast
    fast: bool = False  # vitlab.optimize_for_inference

    @property
    def name(self) -> str:
        if self.fast:
            return "fast"
        name = "compile" if self.compiled else "eager"
        return name + ("+bf16w" if self.bf16_weights else "")

    @classmethod
    def parse(cls, name: str) -> Mode:
        for mode in (cls(fast=True), *(cls(c, w) for c in (False, True) for w in (False, True))):
            if mode.name == name:
                return mode
        raise ValueError(f"unknown mode {name!r}; choose from eager, compile, eager+bf16w, compile+bf16w, fast")

    def applies_to(self, case: Case, implementation: str, modes: tuple[str, ...] = ()) -> bool:
        """Whether this mode runs `case` for `implementation`, among the `modes` tried."""
        if implementation in FAST_DTYPES:  # fp32 images in, fp32 logits out: the fp32 case, fast only
            return self.fast and case.task == "infer" and case.dtype == "fp32"
        if self.fast:
            return implementation == "vitlab" and case.task == "infer"
        if implementation == OPENVINO:  # its own compiled graph, in the case's precision
            return case.task == "infer" and not self.compiled and not self.bf16_weights
        if implementation in ONNXRUNTIME:  # float32 input, no torch.compile or bf16 weights to try
            return case.task == "infer" and case.dtype == "fp32" and not self.compiled and not self.bf16_weights
        if self.bf16_weights and not (case.task == "infer" and case.dtype == "bf16"):
            return False
        # vitlab's compiled inference is its fast path (compiled, frozen), when that is tried.
        return not (self.compiled and implementation == "vitlab" and case.task == "infer" and "fast" in modes)


def inference_step(
    model: nn.Module, images: torch.Tensor, dtype: torch.dtype, mode: Mode
) -> Callable[[], torch.Tensor]:
    model.eval()
    if mode.fast:
        fast = optimize_for_inference(model, dtype=dtype)
        images = images.to(dtype)  # as the bf16-weights modes get them
        return lambda: fast(images)
    if mode.bf16_weights:
        model.to(dtype)
        images = images.to(dtype)
    accelerate(model, dtype)  # vitlab's CPU paths; another library's model has no part to swap
    network = torch.compile(model) if mode.compiled else model
    autocast = dtype != torch.float32 and not mode.bf16_weights

    def step() -> torch.Tensor:
        with torch.inference_mode(), torch.autocast(images.device.type, dtype, enabled=autocast):
            return network(images)

    return step


def training_step(
    model: nn.Module, images: torch.Tensor, dtype: torch.dtype, mode: Mode, num_classes: int
) -> Callable[[], torch.Tensor]:
    model.train()
    labels = torch.randint(num_classes, (images.shape[0],), device=images.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    accelerate(model, dtype)
    network = torch.compile(model) if mode.compiled else model

    def step() -> torch.Tensor:
        with torch.autocast(images.device.type, dtype, enabled=dtype != torch.float32):
            loss = F.cross_entropy(network(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def make_step(
    model: nn.Module,
    case: Case,
    mode: Mode,
    device: torch.device,
    num_classes: int,
    fast_dtype: torch.dtype | None = None,
) -> Callable[[], torch.Tensor]:
    """A callable that runs one step of `case` on `model` (moved to `device`) in `mode`; the fast path
    computes in `fast_dtype` where given (torch.int8) rather than the case's dtype."""
    from vitlab.export import OnnxModel

    if isinstance(model, OnnxModel | OpenVinoModel) and device.type != "cpu":
        raise ValueError(f"{type(model).__name__} runs on the CPU here, not {device}")
    model.to(device)
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(case.batch, 3, case.image_size, case.image_size, generator=generator).to(device)
    if isinstance(model, OpenVinoModel):
        model.compile(case.dtype, tuple(images.shape), torch.get_num_threads())
    if case.task == "infer":
        if fast_dtype is not None and mode.fast:
            return inference_step(model, images, fast_dtype, mode)
        return inference_step(model, images, case.torch_dtype, mode)
    return training_step(model, images, case.torch_dtype, mode, num_classes)
