"""The pieces of a data-parallel run that need no second process: the attempt number agreed in a store
that earlier attempts left keys in, each process's GPU, where the trainer's own collectives go, the
shares of an evaluation, a run folder not shared between nodes, and GPU generators restored on another
GPU count (through a fake torch.cuda surface)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from vitlab.model import ConfigError
from vitlab.training import processes
from vitlab.training.distributed import EvalSlices
from vitlab.training.processes import Processes
from vitlab.training.rng import capture_rng, restore_rng

pytestmark = pytest.mark.unit


def attempt(store: dist.Store, world_size: int) -> list[int]:
    """Each of `world_size` processes (threads here) asks for the attempt number; what each got."""
    got = [0] * world_size

    def ask(rank: int) -> None:
        got[rank] = processes.attempt_number(store, rank, world_size, timeout=timedelta(seconds=30))

    threads = [threading.Thread(target=ask, args=(rank,)) for rank in reversed(range(world_size))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return got


def test_every_process_of_an_attempt_gets_its_number_whatever_earlier_ones_left():
    store = dist.HashStore()
    assert attempt(store, 3) == [1, 1, 1]
    store.set("vitlab/ask/2", "a question an attempt killed before its answer left")
    assert attempt(store, 3) == [2, 2, 2]
    assert attempt(store, 3) == [3, 3, 3]


@pytest.mark.parametrize(
    ("visible", "local_rank", "expected"), [(8, 3, "cuda:3"), (1, 3, "cuda:0"), (2, 0, "cuda:0"), (1, 0, "cuda:0")]
)
def test_each_process_trains_on_its_local_rank_or_on_the_one_gpu_it_sees(monkeypatch, visible, local_rank, expected):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    place = Processes(rank=local_rank, world_size=8, local_rank=local_rank)
    assert processes.device_for(place, torch.device("cuda")) == torch.device(expected)


@pytest.mark.fault("distributed", kinds=1)
def test_more_processes_than_gpus_is_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(ConfigError, match=r"LOCAL_RANK=2: this process sees 2 GPUs \(CUDA_VISIBLE_DEVICES=0,1\)"):
        processes.device_for(Processes(rank=2, world_size=4, local_rank=2), torch.device("cuda"))


@pytest.mark.parametrize(
    ("backends", "expected"), [("cpu:gloo,cuda:nccl", "cpu"), ("cpu:gloo,cuda:gloo", "cpu"), ("cuda:nccl", "cuda:1")]
)
def test_the_trainers_collectives_go_to_a_device_the_group_serves(monkeypatch, backends, expected):
    monkeypatch.setattr(dist, "get_backend_config", lambda group=None: backends)
    place = Processes(rank=1, world_size=2, local_rank=1, device=torch.device("cuda", 1))
    assert processes.collective_device(place) == torch.device(expected)


@pytest.mark.parametrize(("size", "batch", "world_size"), [(181, 8, 2), (5, 4, 3), (1, 2, 4), (64, 8, 4)])
def test_evaluation_shares_cover_every_image_once(size, batch, world_size):
    shares = [EvalSlices(size, batch, Processes(rank, world_size)) for rank in range(world_size)]
    images = sorted(index for share in shares for batch_ in share for index in batch_)
    assert images == list(range(size))
    assert all(len(share) <= share.batches == -(-size // (batch * world_size)) for share in shares)
    assert all(len(batch_) <= batch for share in shares for batch_ in share)


@pytest.mark.fault("distributed", kinds=1)
def test_a_run_folder_another_node_does_not_see_is_one_line(monkeypatch, tmp_path):
    holder = tmp_path / ".vitlab.lock.holder"
    holder.write_text("host a PID 1 since now\n")
    seen = [("node-a", holder.read_text()), ("node-a", holder.read_text()), ("node-b", None)]
    monkeypatch.setattr(processes, "gather", lambda value, place: seen)
    with pytest.raises(
        ConfigError, match=r"process 2 \(on node-b\) does not see the run folder that process 0 \(on node-a\)"
    ):
        processes.check_shared_folder(tmp_path, holder, Processes(rank=1, world_size=3))


class FakeGPUs:
    """torch.cuda's generator surface for `count` GPUs, this process on `current`."""

    def __init__(self, monkeypatch, count: int, current: int = 0) -> None:
        self.count, self.states = count, {index: torch.tensor([index], dtype=torch.uint8) for index in range(count)}
        for module in (torch.cuda, torch.cuda.random):
            monkeypatch.setattr(module, "set_rng_state", self.set_rng_state)
            monkeypatch.setattr(module, "get_rng_state", self.get_rng_state)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [self.states[i] for i in range(count)])

    def get_rng_state(self, device="cuda"):
        return self.states[torch.device(device, 0).index if isinstance(device, str) else int(device)]

    def set_rng_state(self, state, device="cuda"):
        index = torch.device(device).index if isinstance(device, str) else int(device)
        if index is None or index >= self.count:
            raise IndexError(f"no GPU {device} of {self.count}")
        self.states[index] = state


def test_gpu_generators_restore_with_fewer_gpus_visible(monkeypatch):
    written = FakeGPUs(monkeypatch, count=8, current=0)
    written.states[0] = torch.tensor([42], dtype=torch.uint8)
    state = capture_rng()
    restored = FakeGPUs(monkeypatch, count=1)
    restore_rng(state)
    assert restored.states[0].tolist() == [42]


def test_a_checkpoint_with_every_visible_gpus_generators_restores_on_one(monkeypatch, caplog):
    state = capture_rng()
    state.pop("cuda_device", None)
    state["cuda"] = [torch.tensor([index + 10], dtype=torch.uint8) for index in range(8)]  # as written before
    restored = FakeGPUs(monkeypatch, count=1)
    restore_rng(state)
    assert restored.states[0].tolist() == [10]


def test_one_process_trains_on_any_device_and_several_on_cpus_or_gpus_only():
    assert processes.start(Processes(), torch.device("mps")).device == torch.device("mps")
    with pytest.raises(ConfigError, match="run.device='mps': data-parallel training runs on CPUs"):
        processes.start(Processes(rank=0, world_size=2), torch.device("mps"))
