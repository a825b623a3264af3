"""Optimisers and learning-rate schedules.

Parameter groups follow the reference code: weight decay applies to the weight matrices only,
never to norms, biases, the class token or position embeddings (`model.no_weight_decay()`).
With `optim.layer_decay` (BEiT / MAE fine-tuning) the groups are those of timm's
`param_groups_layer_decay`: one pair per layer of layer_groups.py, layer l of n taking the learning rate
times layer_decay ** (n - 1 - l), so the head trains at the full rate and the embeddings slowest.
Frozen parameters (requires_grad False, layers.freeze_layers) are left out of every group.
The schedule is a linear warm-up to the peak learning rate, then linear or cosine decay (or none).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from .config import OptimSpec, ScheduleSpec
from .distributed import full_tensor
from .layer_groups import layer_ids

log = logging.getLogger("vitlab")


def clip_gradients(model: nn.Module, max_norm: float | None) -> torch.Tensor:
    """The global gradient norm, before clipping it to `max_norm` when set (FSDP: of every shard); a
    tensor where the gradients are, so that reading it is the caller's one wait for the device."""
    if max_norm is not None:
        return full_tensor(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    return full_tensor(torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None]))


def _no_decay_names(model: nn.Module) -> set[str]:
    if hasattr(model, "no_weight_decay"):
        no_weight_decay: Callable[[], set[str]] = getattr(model, "no_weight_decay")  # noqa: B009 (typed here)
        return set(no_weight_decay())
    return {name for name, param in model.named_parameters() if param.dim() <= 1}  # norms, biases


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: decayed weight matrices, and everything `model.no_weight_decay()` names (any other
    module: its vectors, i.e. norms and biases)."""
    skip = _no_decay_names(model)
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if name in skip else decay).append(param)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


def layer_decay_groups(model: nn.Module, weight_decay: float, layer_decay: float) -> list[dict]:
    """timm's param_groups_layer_decay on vitlab's weight-decay rule: a decayed and an undecayed group
    per layer, each with `lr_scale` and `param_names`; the head's first, so that param_groups[0]
    carries the schedule's own learning rate (the one the trainer logs)."""
    ids, skip = layer_ids(model, "optim.layer_decay"), _no_decay_names(model)
    last = max(ids.values())
    groups: dict[tuple[int, bool], dict] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        layer, decayed = ids[name], name not in skip
        group = groups.setdefault(
            (layer, decayed),
            {
                "params": [],
                "param_names": [],
                "lr_scale": layer_decay ** (last - layer),
                "weight_decay": weight_decay if decayed else 0.0,
            },
        )
        group["params"].append(param)
        group["param_names"].append(name)
    return [groups[key] for key in sorted(groups, key=lambda key: (-key[0], not key[1]))]


def _optimizer_groups(model: nn.Module, spec: OptimSpec) -> list[dict]:
    if spec.layer_decay is None:
        return param_groups(model, spec.weight_decay)
    groups = layer_decay_groups(model, spec.weight_decay, spec.layer_decay)
    # The optimiser reads each group's own rate; the schedule scales it from there (LambdaLR).
    return [
        {
            "params": g["params"],
            "weight_decay": g["weight_decay"],
            "lr": spec.lr * g["lr_scale"],
            "lr_scale": g["lr_scale"],
        }
        for g in groups
    ]


class TfaAdamW(torch.optim.Optimizer):
    """TensorFlow Addons' AdamW (`tfa.optimizers.AdamW`), which the Keras ViT example trains with.

    Each step every variable first shrinks by `weight_decay` times itself, not scaled by the learning
    rate (tfa's DecoupledWeightDecayExtension: `var.assign_sub(wd * var)`, before the update), then
    takes Keras' Adam step: lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps), epsilon
    added to the uncorrected sqrt(v) (torch's Adam adds it to the corrected one).
    """

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-7,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self.state[param]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float64)
                    state["exp_avg"] = torch.zeros_like(param)
                    state["exp_avg_sq"] = torch.zeros_like(param)
                state["step"] += 1
                t = float(state["step"])
                param.mul_(1.0 - group["weight_decay"])
                state["exp_avg"].lerp_(param.grad, 1.0 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(param.grad, param.grad, value=1.0 - beta2)
                step_size = group["lr"] * math.sqrt(1.0 - beta2**t) / (1.0 - beta1**t)
                param.addcdiv_(state["exp_avg"], state["exp_avg_sq"].sqrt().add_(group["eps"]), value=-step_size)
        return loss


def build_optimizer(model: nn.Module, spec: OptimSpec) -> torch.optim.Optimizer:
    if spec.name == "tfa_adamw":  # decays every variable, norms and biases too, as tfa does
        return TfaAdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=spec.lr,
            betas=spec.betas,
            eps=spec.eps,
            weight_decay=spec.weight_decay,
        )
    groups = _optimizer_groups(model, spec)
    if spec.name == "sgd":
        return torch.optim.SGD(groups, lr=spec.lr, momentum=spec.momentum)
    if spec.name == "adam":  # weight decay added to the gradient (L2)
        return torch.optim.Adam(groups, lr=spec.lr, betas=spec.betas, eps=spec.eps)
    # Decoupled weight decay scaled by the learning rate: the paper's (Flax) Adam and Keras' AdamW.
    return torch.optim.AdamW(groups, lr=spec.lr, betas=spec.betas, eps=spec.eps)


@dataclass
class WarmupDecay:
    """Learning-rate factor after `step` optimiser steps: linear warm-up, then decay to `end_ratio`.

    A plain dataclass (not a lambda) so that LambdaLR's state_dict records its fields.
    """

    total_steps: int
    warmup_steps: int = 0
    decay: str = "cosine"
    end_ratio: float = 0.0

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps  # the first step already moves the weights
        if self.decay == "constant":
            return 1.0
        span = max(self.total_steps - self.warmup_steps, 1)
        progress = min((step - self.warmup_steps) / span, 1.0)
        if self.decay == "linear":
            shape = 1.0 - progress
        else:
            shape = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.end_ratio + (1.0 - self.end_ratio) * shape


def warmup_steps(spec: ScheduleSpec, steps_per_epoch: int) -> int:
    return spec.warmup_steps or round(spec.warmup_epochs * steps_per_epoch)


def total_steps(spec: ScheduleSpec, steps_per_epoch: int) -> int:
    if spec.steps is not None:
        return spec.steps
    assert spec.epochs is not None  # TrainConfig checks that exactly one of them is set
    return spec.epochs * steps_per_epoch


def build_schedule(
    optimizer: torch.optim.Optimizer, spec: ScheduleSpec, steps_per_epoch: int
) -> torch.optim.lr_scheduler.LambdaLR:
    total, warmup = total_steps(spec, steps_per_epoch), warmup_steps(spec, steps_per_epoch)
    if warmup >= total:
        log.warning(
            "the learning-rate warm-up (%d steps) is at least as long as the run (%d steps): the rate "
            "rises for the whole run and never decays; shorten schedule.warmup_steps or "
            "schedule.warmup_epochs",
            warmup,
            total,
        )
    factor = WarmupDecay(
        total_steps=total,
        warmup_steps=warmup,
        decay=spec.decay,
        end_ratio=spec.end_lr_ratio,
    )
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def build_ema(model: nn.Module, decay: float | None) -> AveragedModel | None:
    """The exponential moving average of the weights (optim.ema_decay), buffers included; None when off."""
    if not decay:
        return None
    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)
