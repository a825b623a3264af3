"""Data-parallel training under torchrun: DDP, or FSDP2 for models too large to copy to every process.

    torchrun --nproc_per_node=2 -m vitlab train --recipe demo --out runs/ddp
    torchrun --nproc_per_node=8 -m vitlab train --model L/16 --data-parallel fsdp ...

torchrun starts one process per device and sets RANK, WORLD_SIZE and LOCAL_RANK. Every process builds
the same model from the same seed and walks the same seeded data order; each micro-batch of that order
is cut into WORLD_SIZE equal slices, one per process, and the gradients are averaged across processes
before the optimiser step. So the weights after a step are those of one process on the whole batch (up
to float summation order, and the dropout / Mixup draws each process makes for its own slice), and a
run resumes on any number of processes. Backend: gloo on CPU, nccl on CUDA.

- ddp: every process holds the whole model (DistributedDataParallel); process 0 writes the usual
  checkpoint file and the model folder.
- fsdp: FSDP2's fully_shard, each encoder block one unit, spreads parameters, gradients and optimiser
  state over the processes. Its checkpoints are torch.distributed.checkpoint folders that each process
  writes its shards into and that load into any number of processes (a single one too).

Faults: under `torchrun --max-restarts=N` a process that dies takes the others down and torchrun starts
them all again, with TORCHELASTIC_RESTART_COUNT > 0; a restarted run resumes from its latest checkpoint
by itself (no --resume to add), and says so.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import BatchSampler, Sampler

from vitlab.model import BiTResNet, ConfigError, VisionTransformer, create_untrained

from . import checkpoint as ckpt
from .atomic_files import atomic_folder, atomic_write, remove_partial_writes

log = logging.getLogger("vitlab")


@dataclass(frozen=True)
class Processes:
    """This process's place among the processes torchrun started (one process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    restarts: int = 0  # how often torchrun has restarted the processes of this run

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def from_environment() -> Processes:
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))  # set by torchrun, 0 at first
    if world_size == 1:
        return Processes(restarts=restarts)
    return Processes(int(os.environ["RANK"]), world_size, int(os.environ.get("LOCAL_RANK", "0")), restarts)


def start(processes: Processes, device: torch.device) -> torch.device:
    """Join the process group; the device this process trains on (cuda:LOCAL_RANK on GPUs)."""
    if not processes.distributed:
        return device
    if device.type == "cuda":
        device = torch.device("cuda", processes.local_rank)
        torch.cuda.set_device(device)
    elif device.type != "cpu":
        raise ConfigError(f"run.device={device.type!r}: data-parallel training runs on CPUs (gloo) or CUDA (nccl)")
    if not dist.is_initialized():
        # torchrun keeps one store for all attempts of a run, and gloo would read the addresses a dead
        # attempt left there ("connection refused" after a restart); each attempt gets its own keys.
        store, rank, world_size = next(dist.rendezvous("env://"))
        store = dist.PrefixStore(f"vitlab/attempt-{processes.restarts}/", store)
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo", store=store, rank=rank, world_size=world_size
        )
        _OWNED_GROUP.append(dist.group.WORLD)
    if not processes.is_main:
        log.setLevel(logging.WARNING)  # one voice: process 0 reports progress
    return device


def stop(processes: Processes) -> None:
    """Leave the process group that `start` joined. A process that exits with it still open aborts
    in gloo's teardown ("terminate called without an active exception"), and torchrun then kills the
    others, possibly mid-write."""
    if processes.distributed and _OWNED_GROUP and dist.is_initialized():
        _OWNED_GROUP.clear()
        dist.destroy_process_group()


_OWNED_GROUP: list = []  # the group `start` created, if it did (a caller's own group is left alone)


def check_batch(micro_batch: int, processes: Processes) -> None:
    if micro_batch % processes.world_size:
        raise ConfigError(
            f"data.batch_size / optim.grad_accum = {micro_batch} images per micro-batch do not split "
            f"evenly over {processes.world_size} processes"
        )


def wrap(model: nn.Module, processes: Processes, strategy: str, device: torch.device) -> nn.Module:
    """The module that training calls: the model itself, DDP around it, or the model sharded in place."""
    if not processes.distributed:
        return model
    if strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in getattr(model, "blocks", ()):  # one all-gather per encoder block
            fully_shard(block)
        fully_shard(model)
        return model
    return nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


class RankSlices(Sampler[list]):
    """This process's slice of every batch of `batches`: data-parallel processes share one data order.
    A contiguous slice, or with `strided` every world_size-th sample, so that the repeated copies of
    an image (augment.repeats) go to different processes, as DeiT's RASampler deals them."""

    def __init__(self, batches: BatchSampler, processes: Processes, strided: bool = False) -> None:
        self.batches = batches
        self.processes = processes
        self.strided = strided

    @property
    def sampler(self) -> Sampler[Any] | Iterable[Any]:  # the trainer positions the epoch through it (loader.py)
        return self.batches.sampler

    def __iter__(self) -> Iterator[list]:
        rank, world_size = self.processes.rank, self.processes.world_size
        for batch in self.batches:
            size = len(batch) // world_size
            yield batch[rank::world_size] if self.strided else batch[rank * size : (rank + 1) * size]

    def __len__(self) -> int:
        return len(self.batches)


def mean_over_processes(value: float, processes: Processes) -> float:
    if not processes.distributed:
        return value
    total = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(total)
    return float(total) / processes.world_size


def any_process(flag: bool, processes: Processes) -> bool:
    """True on every process when it is true on one (e.g. a stop signal that reached only one)."""
    if not processes.distributed:
        return flag
    value = torch.tensor([int(flag)])
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value)


def barrier(processes: Processes) -> None:
    if processes.distributed:
        dist.barrier()


def full_tensor(value: Any) -> Any:
    """A sharded (DTensor) result, such as FSDP's gradient norm, as one ordinary tensor."""
    return value.full_tensor() if hasattr(value, "full_tensor") else value


# -- sharded checkpoints (fsdp) -------------------------------------------------------------------
def save_checkpoint(
    out: Path,
    step: int,
    state: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    keep: int,
    processes: Processes,
    sharded: bool,
) -> Path | None:
    """The checkpoint of `step`: sharded, every process writes its shards (save_sharded); replicated,
    process 0 writes it and none runs on (or exits) before it is in place (None on the others)."""
    if sharded:
        return save_sharded(out, step, state, model, optimizer, keep, processes)
    path = ckpt.save_checkpoint(out, step, state, keep) if processes.is_main else None
    barrier(processes)
    return path


def save_sharded(
    out: Path,
    step: int,
    state: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    keep: int,
    processes: Processes,
) -> Path:
    """Every process writes its shards of model and optimiser into DIR/checkpoints/step-N/ (atomic,
    see atomic_files.atomic_folder); process 0 adds the rest of `state` and points `latest` at it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    path = ckpt.checkpoint_dir(out) / f"step-{step:08d}"
    if processes.is_main:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_partial_writes(path.parent)
    barrier(processes)
    model_state, optimizer_state = get_state_dict(model, optimizer)
    rest = {key: value for key, value in state.items() if key not in ("model", "optimizer")}
    with atomic_folder(path, commit=processes.is_main) as partial:
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=partial)
        if processes.is_main:
            document = {"format": ckpt.FORMAT, "format_version": ckpt.FORMAT_VERSION, **rest}
            atomic_write(partial / ckpt.SHARDED_STATE, lambda file: torch.save(document, file))
    if processes.is_main:
        ckpt.publish(out, path, keep)
    barrier(processes)
    return path


def load_sharded(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load a sharded checkpoint's model and optimiser into this run's (sharded or whole) model."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    state: dict[str, Any] = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def load_weights(
    path: Path | None, state: Mapping[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer, sharded: bool
) -> None:
    """The model and optimiser states of the checkpoint at `path` (whose document is `state`)."""
    if sharded:
        assert path is not None, "a sharded checkpoint's weights are read from its folder"
        load_sharded(path, model, optimizer)
    else:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])


def whole_model(model: nn.Module, processes: Processes, sharded: bool) -> VisionTransformer | BiTResNet:
    """The model with all its weights in one module: FSDP gathers them (every process takes part)
    into an unsharded copy on process 0; a replicated model is returned as it is."""
    assert isinstance(model, (VisionTransformer, BiTResNet)), type(model)  # the run's model or its EMA copy
    if not sharded:
        return model
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    weights = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not processes.is_main:
        return model
    whole = create_untrained(model.config)
    whole.load_state_dict(weights)
    return whole
