"""Device and precision: fp32 by default on CPU, bf16 autocast on request, fp16 only on GPUs."""

from __future__ import annotations

import json

import pytest
import torch

from helpers import tiny_config
from vitlab.model import ConfigError
from vitlab.runtime import resolve_device, resolve_precision
from vitlab.training import Callback, Trainer


@pytest.mark.unit
def test_cpu_defaults_to_fp32_and_refuses_fp16():
    cpu = resolve_device("cpu")
    assert resolve_precision("auto", cpu).name == "fp32" and resolve_precision("auto", cpu).grad_scaler() is None
    with pytest.raises(ConfigError, match="precision 'fp16' needs a GPU"):
        resolve_precision("fp16", cpu)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="device 'cuda' requested, but torch sees no CUDA GPU"):
            resolve_device("cuda")


class LogitsDtype(Callback):
    """Records the dtype the model computes in during training (a forward hook on the head)."""

    def on_train_start(self, trainer):
        self.dtypes = set()
        trainer.model.head.register_forward_hook(lambda module, inputs, output: self.dtypes.add(output.dtype))


@pytest.mark.integration
def test_bf16_autocast_on_request(tmp_path):
    seen = LogitsDtype()
    result = Trainer(
        tiny_config(tmp_path, schedule={"steps": 4}, run={"precision": "bf16", "eval_every": 4}), callbacks=[seen]
    ).fit()
    assert seen.dtypes == {torch.bfloat16}
    assert result.summary["precision"] == "bf16" and result.model.head.weight.dtype == torch.float32
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(torch.isfinite(torch.tensor(row["loss"])) for row in rows)
