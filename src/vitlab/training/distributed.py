"""Data-parallel training under torchrun: DDP, or FSDP2 for models too large to copy to every process.

    torchrun --nproc_per_node=2 -m vitlab train --recipe demo --out runs/ddp
    torchrun --nproc_per_node=8 -m vitlab train --model L/16 --data-parallel fsdp ...

Every process builds the same model from the same seed and walks the same seeded data order; each
micro-batch of that order is cut into WORLD_SIZE equal slices, one per process, and the gradients are
averaged across processes once per optimiser step (not once per micro-batch: `micro_batches`). So the
weights after a step are those of one process on the whole batch, up to float summation order and the
dropout, stochastic-depth and Mixup draws, which each process makes for its own slice from its own seed
(run.seed + rank), and a run resumes on any number of processes. Joining the processes and what they
agree on: processes.py.

- ddp: every process holds the whole model (DistributedDataParallel); process 0 writes the usual
  checkpoint file and the model folder.
- fsdp: FSDP2's fully_shard, each encoder block one unit, spreads parameters, gradients and optimiser
  state over the processes; under bf16 / fp16 it gathers the parameters in that type and sums the
  gradients in fp32, as DDP sums them. Its checkpoints are torch.distributed.checkpoint folders that
  each process writes its shards into and that load into any number of processes (a single one too).

Evaluation is shared out too (`EvalSlices`): each process scores every world_size-th image of each
batch, and the counts and loss sums are added up over the processes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import BatchSampler, Sampler

from vitlab.model import BiTResNet, ConfigError, VisionTransformer, create_untrained

from . import checkpoint as ckpt
from .atomic_files import atomic_folder, atomic_write, remove_partial_writes
from .processes import Processes, barrier

log = logging.getLogger("vitlab")


def check_batch(micro_batch: int, processes: Processes) -> None:
    if micro_batch % processes.world_size:
        raise ConfigError(
            f"data.batch_size / optim.grad_accum = {micro_batch} images per micro-batch do not split "
            f"evenly over {processes.world_size} processes"
        )


def wrap(model: nn.Module, processes: Processes, strategy: str, dtype: torch.dtype | None = None) -> nn.Module:
    """The module that training calls: the model itself, DDP around it, or the model sharded in place
    (`dtype`: the precision's autocast type, in which FSDP gathers the parameters)."""
    if not processes.distributed:
        return model
    if strategy == "fsdp":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None)
        for block in getattr(model, "blocks", ()):  # one all-gather per encoder block
            fully_shard(block, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        return model
    device = processes.device
    return nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


def micro_batches(parallel: nn.Module, count: int) -> Iterator[contextlib.AbstractContextManager]:
    """A context for each of a step's `count` micro-batches to run its backward in: the gradients
    accumulate locally and are reduced over the processes in the last one's backward (DDP's no_sync,
    FSDP's set_requires_gradient_sync), one reduction per step."""
    from torch.distributed.fsdp import FSDPModule

    for index in range(count):
        last = index == count - 1
        if isinstance(parallel, FSDPModule):
            parallel.set_requires_gradient_sync(last)
        if isinstance(parallel, nn.parallel.DistributedDataParallel) and not last:
            yield parallel.no_sync()
        else:
            yield contextlib.nullcontext()


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


class EvalSlices(Sampler[list[int]]):
    """This process's share of an evaluation of `size` images in order: of each run of
    batch_size x world_size images, every world_size-th, so that shares differ by at most one image
    and none is scored twice (torch's DistributedSampler repeats images to even them out). A share that
    comes out empty is left out; `batches` counts the batches every process goes through."""

    def __init__(self, size: int, batch_size: int, processes: Processes) -> None:
        self.size, self.batch_size, self.processes = size, batch_size, processes

    @property
    def batches(self) -> int:
        step = self.batch_size * self.processes.world_size
        return -(-self.size // step)

    def __iter__(self) -> Iterator[list[int]]:
        rank, world_size = self.processes.rank, self.processes.world_size
        step = self.batch_size * world_size
        for start in range(0, self.size, step):
            share = list(range(start + rank, min(start + step, self.size), world_size))
            if share:
                yield share

    def __len__(self) -> int:
        return sum(1 for _ in self)


def padded(batches: Iterable[Any], missing: int, shape: tuple[int, ...]) -> Iterator[Any]:
    """`batches`, then `missing` empty ones of images of `shape`: every process runs as many forward
    passes as the others (a sharded model gathers its parameters in each, all processes together)."""
    yield from batches
    for _ in range(missing):
        yield torch.empty(0, *shape), torch.empty(0, dtype=torch.long)


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
