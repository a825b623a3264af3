"""A few data-parallel training steps of vitlab's model: DDP over nccl on GPUs (gloo on CPUs), checked
and timed.

    python -m torch.distributed.run --standalone --nproc_per_node=N -m vitlab.bench.ddp --out DIR

(`python -m vitlab.bench.gpu` starts it, one process per GPU.) The processes join the group the trainer
joins (training/processes.py: cpu:gloo,cuda:nccl on GPUs) and agree on each step's loss and stop flag
through the trainer's own collectives, as a training run does. First a check: the gradients that DDP
averages over the processes, each holding its own slice of one batch, must equal those of one model
given the whole batch, in fp32 (TF32 off), within GRAD_TOLERANCE of the largest gradient. A slice
dealt twice or missed, or an average that is a sum, fails it. One process (a machine with one GPU:
nccl refuses two processes on one device) checks only that DDP's hooks leave the gradients alone.
Then `--steps` timed steps in bf16 autocast. Process 0 writes DIR/ddp.json (its "markdown" renders
in docs/benchmarks.md through `vitlab bench report`) and DIR/ddp.md; the exit status is 1 when the
check fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from vitlab.model import create_untrained
from vitlab.training import processes

from .machine import describe, synchronize
from .report import machine_line

KIND = "ddp"
GRAD_TOLERANCE = 1e-4  # of the largest gradient entry: fp32 sums in another order differ by ~1e-6


def gradients(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def replicated(model: nn.Module, device: torch.device) -> nn.Module:
    """`model` in DDP, whatever the number of processes (vitlab's trainer wraps only from two on)."""
    return nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def gradient_check(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, device: torch.device) -> dict:
    """DDP's averaged gradient against one model's on the whole batch (each process: its slice)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    per_process = images.shape[0] // world
    mine = slice(rank * per_process, (rank + 1) * per_process)
    parallel = replicated(model, device)  # held through backward: its reducer does the averaging
    F.cross_entropy(parallel(images[mine]), labels[mine]).backward()
    averaged = gradients(model).clone()
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(images), labels).backward()  # the module itself: no hooks, the whole batch
    whole = gradients(model)
    model.zero_grad(set_to_none=True)
    difference = (averaged - whole).abs().max().item() / whole.abs().max().item()
    return {"max_difference": difference, "tolerance": GRAD_TOLERANCE, "passed": difference <= GRAD_TOLERANCE}


def timed_steps(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, steps: int, place: processes.Processes
) -> dict:
    """`steps` bf16-autocast training steps through DDP after two untimed ones, each ending as the
    trainer's do (the mean loss and a stop flag agreed over the processes); milliseconds per step."""
    device = place.device
    parallel = replicated(model, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    milliseconds, losses = [], []
    for step in range(steps + 2):
        synchronize(device)
        start = time.perf_counter()
        with torch.autocast(device.type, torch.bfloat16):
            loss = F.cross_entropy(parallel(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        losses.append(processes.mean_over_processes(loss.item(), place))
        processes.any_process(False, place)
        if step >= 2:
            milliseconds.append(1e3 * (time.perf_counter() - start))
    slowest = max(processes.gather(statistics.median(milliseconds), place))  # a step waits for the slowest
    images_per_s = dist.get_world_size() * images.shape[0] / slowest * 1e3
    return {"step_ms": slowest, "images_per_s": images_per_s, "losses": losses}


def markdown(result: dict) -> str:
    check, timing = result["check"], result["timing"]
    world, batch = result["world_size"], result["batch_per_process"]
    verdict = "passed" if check["passed"] else "FAILED"
    lines = [
        f"{result['variant']} at {result['image_size']} px, {result['backend']}, {world} process(es), "
        f"{batch} images per process.",
        "",
        f"Gradient check ({'slices of one batch against the whole batch' if world > 1 else 'one process: DDP hooks only'}"
        f", fp32): largest difference {check['max_difference']:.1e} of the largest gradient, tolerance "
        f"{check['tolerance']:.0e}: {verdict}.",
        "",
        "| processes | backend | images per process | ms per step (median, slowest process) | images/s, all processes "
        "| loss, first step -> last |",
        "|---:|---|---:|---:|---:|---|",
        f"| {world} | {result['backend']} | {batch} | {timing['step_ms']:.1f} "
        f"| {timing['images_per_s']:.1f} | {timing['losses'][0]:.3f} -> {timing['losses'][-1]:.3f} |",
    ]
    return "\n".join(lines) + "\n"


def command_parser() -> argparse.ArgumentParser:
    """The flags of `python -m vitlab.bench.ddp`."""
    parser = argparse.ArgumentParser(prog="python -m vitlab.bench.ddp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny model at 32 px: checks the script on any machine")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, help="images per process (default 64 on a GPU, 2 with --tiny)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", default="build/bench-gpu")
    return parser


def join_alone(device: torch.device) -> None:
    """Make a lone process a group of one, which DDP needs; under torchrun it keeps the launcher's store
    address (another would hang), and its CUDA device, plain "cuda", is the current one."""
    if device.type == "cuda":
        torch.cuda.set_device(torch.cuda.current_device() if device.index is None else device.index)
    for name, value in dict(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29531").items():
        os.environ.setdefault(name, value)
    dist.init_process_group(processes.BACKENDS[device.type], timeout=timedelta(minutes=5))


def main(argv: list[str] | None = None) -> int:
    parser = command_parser()
    args = parser.parse_args(argv)
    if args.steps < 1 or (args.batch is not None and args.batch < 1):
        parser.error(f"--steps {args.steps} and --batch {args.batch}: each at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    cuda = args.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False  # the check is fp32
    place = processes.start(processes.from_environment(), torch.device(args.device))
    if not place.distributed:  # one process (the trainer joins no group then): DDP still needs one
        join_alone(place.device)
    device, backend = place.device, processes.BACKENDS[place.device.type]
    try:
        variant, image_size = ("mu/16", 32) if args.tiny else ("B/16", 224)
        batch = args.batch or (2 if args.tiny else 64)
        world = dist.get_world_size()
        torch.manual_seed(0)  # the same weights and the same whole batch on every process
        model = create_untrained(variant, image_size=image_size, num_classes=1000).to(device)
        head = model.head
        assert isinstance(head, nn.Linear)
        nn.init.normal_(head.weight, std=0.02)  # a zero head would zero every gradient below it
        images = torch.randn(world * batch, 3, image_size, image_size, device=device)
        labels = torch.randint(1000, (world * batch,), device=device)
        check = gradient_check(model, images, labels, device)
        rank = dist.get_rank()
        mine = slice(rank * batch, (rank + 1) * batch)
        timing = timed_steps(model, images[mine], labels[mine], args.steps, place)
        machine = describe(device)
        result: dict[str, Any] = {
            "kind": KIND,
            "title": f"Data-parallel training ({backend})",
            "machine": machine,
            "variant": variant,
            "image_size": image_size,
            "backend": backend,
            "world_size": world,
            "batch_per_process": batch,
            "check": check,
            "timing": timing,
        }
        result["markdown"] = markdown(result)
        if rank == 0:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "ddp.json").write_text(json.dumps(result, indent=1) + "\n")
            (out / "ddp.md").write_text(machine_line(machine) + "\n\n" + result["markdown"])
            print(result["markdown"])
        return 0 if check["passed"] else 1
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
