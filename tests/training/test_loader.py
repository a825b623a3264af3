"""Repeated augmentation (augment.repeats, DeiT's RASampler): each image comes `repeats` times in a
row under seeds of its own, the copies go to different processes, and a run resumes bitwise."""

from __future__ import annotations

import signal

import pytest
import torch
from torch.utils.data import BatchSampler

from helpers import SignalAt, assert_bitwise_equal, state_of, tiny_config
from vitlab.training import Interrupted, Trainer
from vitlab.training.distributed import Processes, RankSlices
from vitlab.training.loader import EpochSampler, sample_seed
from vitlab.training.rng import hash_seeds


@pytest.mark.unit
def test_repeated_copies_come_in_a_row_under_their_own_seeds():
    sampler = EpochSampler(10, seed=0, repeats=3)
    sampler.set_epoch(2)
    keys = list(sampler)
    assert len(keys) == 10  # the epoch keeps its length, as DeiT's does
    assert [copy for _, _, copy in keys] == [0, 1, 2] * 3 + [0]
    indices = [index for _, index, _ in keys]
    assert indices[:3] == [indices[0]] * 3 and len(set(indices)) == 4
    assert len({sample_seed(0, *key) for key in keys}) == 10
    # without repeats: the permutation and the seeds of before
    plain = EpochSampler(10, seed=0)
    plain.set_epoch(2)
    order = torch.randperm(10, generator=torch.Generator().manual_seed(hash_seeds(0, 2))).tolist()
    assert list(plain) == [(2, index, 0) for index in order]
    assert sample_seed(0, 2, 7, 0) == hash_seeds(0, 2, 7)
    assert indices[::3] == order[:4]
    sampler.set_epoch(2, start=4)  # a resumed epoch continues mid-group
    assert list(sampler) == keys[4:]


@pytest.mark.unit
def test_copies_of_an_image_go_to_different_processes():
    batches = BatchSampler(EpochSampler(12, seed=0, repeats=3), 6, drop_last=True)
    per_rank = [list(RankSlices(batches, Processes(rank, 3), strided=True)) for rank in range(3)]
    for slices in zip(*per_rank):  # one micro-batch: each process gets one copy of the same two images
        assert len({tuple(index for _, index, _ in part) for part in slices}) == 1
        assert [[copy for _, _, copy in part] for part in slices] == [
            [0, 0],
            [1, 1],
            [2, 2],
        ]


@pytest.mark.integration
def test_resumed_run_with_repeated_augmentation_equals_uninterrupted_run(tmp_path):
    run = {
        "augment": {"repeats": 3},
        "schedule": {"steps": 6},
        "run": {"eval_every": 6},
    }
    whole = Trainer(tiny_config(tmp_path / "whole", **run))
    whole.fit()
    out = tmp_path / "stopped"
    with pytest.raises(Interrupted):  # 4 x 32 images: the stop falls inside a group of copies
        Trainer(tiny_config(out, **run), callbacks=[SignalAt(4, signal.SIGTERM)]).fit()
    config = tiny_config(out, **run)
    config.run.resume = True
    resumed = Trainer(config)
    assert resumed.step == 4
    resumed.fit()
    assert_bitwise_equal(state_of(whole.model), state_of(resumed.model))
