"""This process's place in a run that torchrun started, and joining the run's process group.

torchrun starts one process per device and sets RANK, WORLD_SIZE and LOCAL_RANK. `start` picks the
process's GPU, learns which attempt of the run this is, and joins the process group under a key space
of that attempt. The group is `cpu:gloo,cuda:nccl` on GPUs: nccl carries the model's gradients, gloo
the few numbers the trainer agrees on (a loss, a stop flag, the step it resumes from), which live on
the CPU; nccl alone serves CUDA tensors only and refuses them.

Attempts. Under `--max-restarts` a process that dies makes torchrun stop the run's processes and start
them all again, on every node: a new rendezvous round. TORCHELASTIC_RESTART_COUNT counts the restarts
of one node's launcher only (a node restarted because another failed keeps its count), and the store
the processes meet in outlives the rounds, with the keys every earlier round left in it. So the
processes number their attempt themselves, in that store (`attempt_number`), and a restarted attempt
resumes from the run's latest checkpoint on every node.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from vitlab.model import ConfigError

log = logging.getLogger("vitlab")

# The process group's backends, by the device type a run trains on (the CPU side serves the trainer's
# own collectives: distributed.py).
BACKENDS = {"cpu": "gloo", "cuda": "cpu:gloo,cuda:nccl"}
ATTEMPTS = "vitlab/attempts"  # the store's counter of attempts of the run
JOIN_TIMEOUT = timedelta(minutes=30)  # how long process 0 waits for the others to ask (torch's group timeout)
POLL_SECONDS = 0.05


@dataclass(frozen=True)
class Processes:
    """This process's place among the processes torchrun started (one process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    restarts: int = 0  # how often the run's processes were started again (0: the first attempt)
    device: torch.device = torch.device("cpu")  # the device this process trains on
    local_world_size: int = 1  # the run's processes on this machine

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def from_environment() -> Processes:
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))  # this node's launcher's count
    if world_size == 1:
        return Processes(restarts=restarts)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return Processes(
        int(os.environ["RANK"]), world_size, int(os.environ.get("LOCAL_RANK", "0")), restarts, local_world_size=local
    )


def device_for(processes: Processes, device: torch.device) -> torch.device:
    """cuda:LOCAL_RANK when the process sees several GPUs; the one it sees when it sees one (a scheduler
    that gives each task its own GPU through CUDA_VISIBLE_DEVICES)."""
    if device.type != "cuda":
        return device
    visible = torch.cuda.device_count()
    if visible == 1:
        return torch.device("cuda", 0)
    if processes.local_rank >= visible:
        shown = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise ConfigError(
            f"LOCAL_RANK={processes.local_rank}: this process sees {visible} GPUs"
            + (f" (CUDA_VISIBLE_DEVICES={shown})" if shown is not None else "")
            + "; start one process per GPU (torchrun --nproc-per-node)"
        )
    return torch.device("cuda", processes.local_rank)


def start(processes: Processes, device: torch.device) -> Processes:
    """Join the process group (unless the caller has); this process's place, with its device and the
    attempt of the run it belongs to."""
    if not processes.distributed:
        return replace(processes, device=device)
    if device.type not in BACKENDS:
        raise ConfigError(f"run.device={device.type!r}: data-parallel training runs on CPUs (gloo) or CUDA (nccl)")
    device = device_for(processes, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    attempt = 1
    if not dist.is_initialized():
        store, rank, world_size = next(dist.rendezvous("env://"))
        attempt = attempt_number(store, rank, world_size)
        store = dist.PrefixStore(f"vitlab/attempt-{attempt}/", store)
        dist.init_process_group(
            BACKENDS[device.type], store=store, rank=rank, world_size=world_size, device_id=_bound(device)
        )
        _OWNED_GROUP.append(dist.group.WORLD)
    # A launcher that started its processes again because another node's failed keeps its own count:
    # the largest count over the run, or the store's attempt number, says whether this is a restart.
    joined = replace(processes, device=device)
    restarts = max(_all_reduce([processes.restarts, attempt - 1], joined, dist.ReduceOp.MAX))
    if not processes.is_main:
        log.setLevel(logging.WARNING)  # one voice: process 0 reports progress
    return replace(joined, restarts=int(restarts))


def _bound(device: torch.device) -> torch.device | None:
    """The GPU the group's nccl side binds to at once (None on CPUs, where nothing binds)."""
    return device if device.type == "cuda" else None


def stop(processes: Processes) -> None:
    """Leave the process group that `start` joined. A process that exits with it still open aborts
    in gloo's teardown ("terminate called without an active exception"), and torchrun then kills the
    others, possibly mid-write."""
    if processes.distributed and _OWNED_GROUP and dist.is_initialized():
        _OWNED_GROUP.clear()
        dist.destroy_process_group()


_OWNED_GROUP: list = []  # the group `start` created, if it did (a caller's own group is left alone)


@contextlib.contextmanager
def left_if_failing(processes: Processes) -> Iterator[None]:
    """Leaves the process group (stop) when the block raises: a run that fails while it sets up exits
    cleanly, with its one-line error, on every process."""
    try:
        yield
    except BaseException:
        stop(processes)
        raise


def check_shared_folder(out: Path, written: Path, processes: Processes) -> None:
    """ConfigError in every process unless each sees the file `written` in the run folder `out` as
    process 0 wrote it (runlock's holder file): on several nodes, --out must be one shared folder, or
    each node would keep checkpoints of its own and resume from another step."""
    if not processes.distributed:
        return
    try:
        seen = written.read_text()
    except OSError:
        seen = None
    everyone = gather((socket.gethostname(), seen), processes)
    host, expected = everyone[0]
    apart = [(rank, name) for rank, (name, text) in enumerate(everyone) if text != expected]
    if apart:
        rank, name = apart[0]
        raise ConfigError(
            f"run.out={out}: process {rank} (on {name}) does not see the run folder that process 0 (on {host}) "
            f"writes ({len(apart)} process(es) do not); every node needs --out on storage they all share"
        )


# -- the attempt number --------------------------------------------------------------------------------
def attempt_number(store: dist.Store, rank: int, world_size: int, timeout: timedelta = JOIN_TIMEOUT) -> int:
    """The number of this attempt of the run (1, 2, ...), the same in every process of it, from a store
    that may hold the keys of earlier attempts. Process 0 counts the attempt; each other process asks
    for it under a key only it knows this time (a fresh random nonce), so that no answer an earlier
    attempt left can be taken for this one's, and acknowledges it; process 0 answers until all have.
    Every process of an earlier attempt had ended before this one's started (torchrun stops them all
    before the next rendezvous round), so the keys they left stay as they were."""
    if rank != 0:
        nonce = uuid.uuid4().hex
        store.set(f"vitlab/ask/{rank}", nonce)
        answer = f"vitlab/answer/{rank}/{nonce}"
        store.wait([answer], timeout)
        given = store.get(answer).decode()
        store.set(f"vitlab/ack/{rank}/{nonce}", given)
        return int(given)
    attempt = store.add(ATTEMPTS, 1)
    waiting, answered = set(range(1, world_size)), dict[int, str]()
    deadline = time.monotonic() + timeout.total_seconds()
    while waiting:
        for asker in sorted(waiting):
            key = f"vitlab/ask/{asker}"
            if not store.check([key]):
                continue
            nonce = store.get(key).decode()
            if answered.get(asker) != nonce:  # maybe an earlier attempt's question: answered, never acknowledged
                store.set(f"vitlab/answer/{asker}/{nonce}", str(attempt))
                answered[asker] = nonce
            ack = f"vitlab/ack/{asker}/{nonce}"
            if store.check([ack]) and store.get(ack).decode() == str(attempt):
                waiting.discard(asker)
        if waiting and time.monotonic() > deadline:
            raise ConfigError(
                f"process 0 waited {timeout} for process(es) {sorted(waiting)[:8]} of {world_size} to join; "
                "are all nodes started with the same --nnodes and --nproc-per-node?"
            )
        if waiting:
            time.sleep(POLL_SECONDS)
    return attempt


# -- what the processes agree on ---------------------------------------------------------------------------
def collective_device(processes: Processes) -> torch.device:
    """Where the tensors of the trainer's own collectives go: the CPU when the group serves it (gloo,
    cpu:gloo,cuda:nccl), else the training device (a caller's own nccl group serves CUDA alone)."""
    served = {pair.split(":")[0] for pair in dist.get_backend_config().split(",")}
    return torch.device("cpu") if "cpu" in served else processes.device


def _all_reduce(values: list[float], processes: Processes, op: dist.ReduceOp.RedOpType) -> list[float]:
    total = torch.tensor(values, dtype=torch.float64, device=collective_device(processes))
    dist.all_reduce(total, op=op)
    return total.tolist()


def sum_over_processes(values: list[float], processes: Processes) -> list[float]:
    """Each of `values` summed over the processes (float64: counts stay exact up to 2**53)."""
    return _all_reduce(values, processes, dist.ReduceOp.SUM) if processes.distributed else list(values)


def mean_over_processes(value: float, processes: Processes) -> float:
    if not processes.distributed:
        return value
    return sum_over_processes([value], processes)[0] / processes.world_size


def any_process(flag: bool, processes: Processes) -> bool:
    """True on every process when it is true on one (e.g. a stop signal that reached only one)."""
    if not processes.distributed:
        return flag
    return bool(_all_reduce([float(flag)], processes, dist.ReduceOp.MAX)[0])


def gather(value: object, processes: Processes) -> list:
    """`value` of every process, in rank order, on every process (small picklable values)."""
    if not processes.distributed:
        return [value]
    values: list = [None] * processes.world_size
    dist.all_gather_object(values, value)
    return values


def barrier(processes: Processes) -> None:
    if processes.distributed:
        dist.barrier()
