"""`torchrun --nproc-per-node=2 stand_in_run.py OUT STRATEGY`: a training run in the process group a
GPU run joins, with gloo standing in for nccl. Written for test_scale_out.py.

The group: what `processes.start` passes to init_process_group for a CUDA device (read through a fake
torch.cuda surface: two GPUs, set_device a no-op), each nccl replaced by gloo, which like nccl then
serves only the device types it is named for. nccl serves CUDA tensors alone, so a CPU tensor handed
to the group fails here as it would on GPUs ("No backend type associated with device type cpu").

Each process writes OUT/rank-R.json: the backend, the stochastic-depth masks it drew, in which
micro-batch of a step each gradient reduction ran, the parameters' dtype in the forward pass, and its
sharded evaluation of the validation split beside a single-process evaluation of the whole split.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from unittest import mock

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parents[1]))  # helpers.py

from helpers import tiny_config  # noqa: E402
from vitlab.evaluate import evaluate  # noqa: E402
from vitlab.model.block import DropPath  # noqa: E402
from vitlab.training import processes  # noqa: E402
from vitlab.training.loader import eval_loader  # noqa: E402
from vitlab.training.trainer import Trainer  # noqa: E402

DEV_FRACTION = 0.123  # 177 of digits' training images validate: with a batch of 16 (8 per process), the last holds one


class Captured(Exception):
    pass


def cuda_backend() -> str:
    """The backend `processes.start` gives init_process_group when the run trains on a GPU."""
    seen = {}

    def record(backend=None, **options):
        seen["backend"] = backend
        raise Captured

    def one_process(url, **options):
        yield dist.HashStore(), 0, 1

    with (
        mock.patch.object(torch.cuda, "device_count", lambda: 2),
        mock.patch.object(torch.cuda, "set_device", lambda device: None),
        mock.patch.object(dist, "rendezvous", one_process),
        mock.patch.object(dist, "init_process_group", record),
    ):
        try:
            processes.start(processes.Processes(0, 2, 0), torch.device("cuda"))
        except Captured:
            pass
    return seen["backend"]


def stand_in(backend: str) -> str:
    """`backend` with gloo for nccl: "nccl" (CUDA only) -> "cuda:gloo"."""
    pairs = [pair if ":" in pair else f"{'cuda' if pair == 'nccl' else 'cpu'}:{pair}" for pair in backend.split(",")]
    return ",".join(pair.replace(":nccl", ":gloo") for pair in pairs)


def main(out: Path, strategy: str) -> None:
    backend = cuda_backend()
    dist.init_process_group(stand_in(backend))
    rank = dist.get_rank()
    config = tiny_config(
        out / "run",
        model={"drop_path": 0.5, "depth": 2},  # stochastic depth 0 in block 0, 0.5 in block 1
        data={"batch_size": 32, "eval_batch_size": 16, "dev_fraction": DEV_FRACTION},
        optim={"grad_accum": 4},
        schedule={"steps": 2, "warmup_steps": 1},
        run={"eval_every": 1, "ckpt_every_steps": 1, "data_parallel": strategy, "device": "cpu"},
    )
    if strategy == "fsdp":
        config.run.precision = "bf16"
        config.optim.ema_decay, config.run.keep_best, config.run.keep_best_by = None, False, None
    trainer = Trainer(config)
    record: dict = {"backend": backend, "masks": [], "reductions": [], "forward_dtypes": []}
    micro = {"index": -1}

    def count_micro_batch(module, inputs):
        if module.training:
            micro["index"] += 1

    def mask(module, inputs, output):
        if module.training:
            kept = (output.flatten(1) != 0).any(1)
            record["masks"].append(kept.int().tolist())

    trainer.model.register_forward_pre_hook(count_micro_batch)
    trainer.model.blocks[0].register_forward_pre_hook(  # after FSDP's own hook has gathered the parameters
        lambda module, inputs: record["forward_dtypes"].append(str(module.attn.qkv.weight.dtype))
    )
    for module in trainer.model.modules():
        if isinstance(module, DropPath) and module.prob:
            module.register_forward_hook(mask)
    if strategy == "ddp":
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def counted(state, bucket):
            record["reductions"].append(micro["index"])
            return allreduce_hook(state, bucket)

        trainer.parallel.register_comm_hook(None, counted)
    else:
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group

        reduce = _fsdp_param_group.foreach_reduce

        def counted_reduce(*args, **kwargs):
            record["reductions"].append(micro["index"])
            return reduce(*args, **kwargs)

        _fsdp_param_group.foreach_reduce = counted_reduce
    trainer.fit()

    scored = []  # the images this process's forward passes see in the evaluation
    counting = trainer.eval_model.register_forward_pre_hook(lambda module, inputs: scored.append(len(inputs[0])))
    batches = trainer._validation_batches()
    sharded, _ = trainer.objective.evaluate(
        trainer.eval_model, batches, trainer.device, trainer.precision.autocast, trainer._combine
    )
    counting.remove()
    record["scored"] = scored
    record["sharded"], record["val_images"] = sharded, trainer.val_images
    if strategy == "ddp":  # one process, the whole split, one batch size
        whole = evaluate(trainer.eval_model, eval_loader(trainer.val_loader.dataset, 16, 0), device=trainer.device)
        record["single"] = {"val_top1": whole.top1, "val_top5": whole.top5, "val_loss": whole.loss}
    (out / f"rank-{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(Path(sys.argv[1]), sys.argv[2])
