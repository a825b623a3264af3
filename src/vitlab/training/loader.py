"""Data for the trainer: loaders whose order can be resumed (the transforms are in vitlab.data.transforms).

Exact resume needs the data order and every random augmentation to be reproducible from a saved
position. The order of epoch e is a permutation seeded by (seed, e), and the sampler can start
part-way through it. Each sample's augmentation is seeded by (seed, e, index), so it does not depend
on which worker decodes it, how many workers there are, how samples are grouped into (micro-)batches
or what was drawn before: a resumed run sees the same images as an uninterrupted one, and no
worker's generator needs saving.

Repeated augmentation (DeiT's RASampler, `augment.repeats`): each index of the epoch's permutation
comes `repeats` times in a row, the order cut to the dataset's length as DeiT's and timm's samplers
cut it, so an epoch keeps its number of steps and sees 1/repeats of the images. Copy c > 0 of an
image is drawn under (seed, e, index, c), copy 0 under the usual (seed, e, index); under torchrun the
copies are dealt out to different processes (RankSlices, strided).
"""

from __future__ import annotations

import atexit
import signal
import weakref
from collections.abc import Callable, Iterator, Sized
from typing import Any, Protocol

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, Sampler

from .distributed import EvalSlices, RankSlices, check_batch
from .processes import Processes
from .rng import hash_seeds, preserved_rng, reseed


class SizedDataset(Protocol):
    """A map-style dataset with a length (torch's Dataset declares no __len__: not every one has it)."""

    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> Any: ...


class EpochSampler(Sampler[tuple[int, int, int]]):
    """Yields (epoch, index, copy): the epoch's seeded permutation, each index `repeats` times, from
    position `start` on."""

    def __init__(self, size: int, seed: int, repeats: int = 1) -> None:
        self.size = size
        self.seed = seed
        self.repeats = repeats
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        generator = torch.Generator().manual_seed(hash_seeds(self.seed, self.epoch))
        order = torch.randperm(self.size, generator=generator)
        copies = torch.arange(self.size) % self.repeats  # the epoch's first `size` positions
        order = order.repeat_interleave(self.repeats)
        return iter(
            [
                (self.epoch, int(index), int(copy))
                for index, copy in zip(order[self.start : self.size], copies[self.start : self.size])
            ]
        )

    def __len__(self) -> int:
        return self.size - self.start


def sample_seed(seed: int, epoch: int, index: int, copy: int) -> int:
    """The seed of one sample's augmentation; a repeated copy's differs from the first's."""
    return hash_seeds(seed, epoch, index) if copy == 0 else hash_seeds(seed, epoch, index, copy)


class SeededSamples(Dataset):
    """`samples[(epoch, index, copy)]` is `dataset[index]` drawn under its sample_seed, so that a
    transform drawing from torch's, Python's or NumPy's generator repeats exactly on resume; the
    caller's generators are left as they were. The DataLoader fetches whole batches (`__getitems__`)."""

    def __init__(self, dataset: SizedDataset, seed: int) -> None:
        self.dataset = dataset
        self.seed = seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int, int]):
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: list[tuple[int, int, int]]) -> list:
        samples = []
        with preserved_rng():
            for epoch, index, copy in keys:
                reseed(sample_seed(self.seed, epoch, index, copy))
                samples.append(self.dataset[index])
        return samples


def _leave_signals_to_main_process(worker_id: int) -> None:
    """Ctrl-C reaches every process of the terminal's group (and a scheduler may send SIGTERM to
    all); the trainer (main process) answers it by finishing the step and writing a checkpoint,
    which needs its workers alive until then. The main process ends them (shut_down_workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


WORKER_JOIN_SECONDS = 10.0  # how long a worker may take to leave after it is told to, before it is killed
_LOADERS: weakref.WeakSet[DataLoader] = weakref.WeakSet()  # loaders with workers, for the exit handler


def shut_down_workers(loader: DataLoader) -> None:
    """End the loader's worker processes now (a later iteration starts new ones). Persistent workers
    live as long as their loader and ignore SIGTERM, so multiprocessing's exit handler, which sends
    SIGTERM and then waits without a limit, would wait forever for the workers of a loader still
    referenced (e.g. from a traceback) when Python exits. torch keeps the workers in the loader's
    private `_iterator`; a worker that does not leave within WORKER_JOIN_SECONDS is killed."""
    iterator = getattr(loader, "_iterator", None)
    if iterator is None:
        return
    workers = list(getattr(iterator, "_workers", ()))
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()  # asks each worker to leave, waits a few seconds, then sends SIGTERM
    for worker in workers:
        worker.join(WORKER_JOIN_SECONDS)
        if worker.is_alive():
            worker.kill()
            worker.join(WORKER_JOIN_SECONDS)
    loader._iterator = None


@atexit.register  # registered after multiprocessing's and torch's exit handlers, so it runs before them
def _end_workers_at_exit() -> None:
    for loader in list(_LOADERS):
        shut_down_workers(loader)


def _tracked(loader: DataLoader) -> DataLoader:
    if loader.num_workers:
        _LOADERS.add(loader)
    return loader


def _loader_options(workers: int, pin_memory: bool) -> dict:
    return dict(
        num_workers=workers,
        worker_init_fn=_leave_signals_to_main_process if workers else None,
        pin_memory=pin_memory,
        persistent_workers=workers > 0,
        # The loader draws its workers' base seed from this, not from the global generator, so that
        # creating a loader (e.g. for an evaluation) never shifts the training's random stream.
        generator=torch.Generator().manual_seed(0),
    )


def train_loader(
    dataset: SizedDataset,
    micro_batch: int,
    seed: int,
    workers: int,
    pin_memory: bool,
    processes: Processes = Processes(),
    repeats: int = 1,
    collate: Callable[[list], Any] | None = None,
) -> DataLoader:
    """Micro-batches of the training split in the resumable seeded order (last partial batch dropped);
    under torchrun, this process's slice of each (see distributed.py). `collate`: the DataLoader's
    collate_fn (None: torch's default)."""
    sampler = EpochSampler(len(dataset), seed, repeats)
    # BatchSampler groups any keys; torch's stubs type its sampler as one of int indices.
    whole = BatchSampler(sampler, micro_batch, drop_last=True)  # type: ignore[arg-type]
    batches: Sampler[list] = whole
    if processes.distributed:
        check_batch(micro_batch, processes)
        batches = RankSlices(whole, processes, strided=repeats > 1)
    return _tracked(
        DataLoader(
            SeededSamples(dataset, seed),
            batch_sampler=batches,
            collate_fn=collate,
            **_loader_options(workers, pin_memory),
        )
    )


def epoch_sampler(loader: DataLoader) -> EpochSampler:
    """The EpochSampler under a train_loader's batches (through RankSlices under torchrun), which the
    trainer positions at each epoch."""
    batches = loader.batch_sampler
    assert isinstance(batches, (BatchSampler, RankSlices)), batches
    sampler = batches.sampler
    assert isinstance(sampler, EpochSampler), sampler
    return sampler


def images_of(loader: DataLoader) -> int:
    """How many images the loader's (map-style) dataset holds."""
    dataset = loader.dataset
    assert isinstance(dataset, Sized), dataset
    return len(dataset)


def eval_loader(
    dataset: Dataset,
    batch_size: int,
    workers: int,
    pin_memory: bool = False,
    collate_fn: Any = None,
    processes: Processes = Processes(),
) -> DataLoader:
    """Batches of `dataset` in order; under torchrun this process's share of them (distributed.EvalSlices),
    `batch_size` the whole batch of all processes together."""
    if not processes.distributed:
        batching: dict[str, Any] = dict(batch_size=batch_size, shuffle=False)
    else:
        share = -(-batch_size // processes.world_size)
        batching = dict(batch_sampler=EvalSlices(len(dataset), share, processes))  # type: ignore[arg-type]
    return _tracked(DataLoader(dataset, collate_fn=collate_fn, **batching, **_loader_options(workers, pin_memory)))
