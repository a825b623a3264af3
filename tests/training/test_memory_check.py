"""The training memory check knows where each process trains: its slice of the micro-batch, the
precision, the attention kernel that will run, and the GPU's free memory (through a fake torch.cuda
surface) or the machine's; the estimate is held against the measured peak of a small run."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers import tiny_config
from vitlab.bench.memory import cpu_peak_bytes
from vitlab.memory import budget
from vitlab.model import ConfigError, config_for, create_untrained
from vitlab.training.processes import Processes
from vitlab.training.run_parts import check_run_memory

GPU = "NVIDIA H100 80GB HBM3"
GPU_BYTES = 80 * 10**9  # the 80 GB a datasheet states, all of it taken as free (CUDA's context aside)
HOST_BYTES = 2**40  # an 8-GPU server with 1 TiB of RAM (as some clouds rent them)


@pytest.fixture
def eight_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (GPU_BYTES, GPU_BYTES))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: GPU)
    monkeypatch.setattr(budget, "available_memory", lambda: HOST_BYTES)
    return Processes(rank=0, world_size=8, local_rank=0, device=torch.device("cuda", 0), local_world_size=8)


def b16_run(tmp_path, batch: int, grad_accum: int = 1):
    config = tiny_config(
        tmp_path, data={"batch_size": batch, "workers": 8}, optim={"grad_accum": grad_accum}, run={"precision": "bf16"}
    )
    return config, config_for("B/16", num_classes=1000)


@pytest.mark.unit
def test_b16_at_a_global_batch_of_4096_fits_eight_80_gb_gpus_in_bf16(tmp_path, eight_gpus):
    config, model = b16_run(tmp_path, 4096)  # 512 images per GPU, --grad-accum 1
    check_run_memory(config, model, eight_gpus, "bf16")


@pytest.mark.unit
@pytest.mark.fault("bad-config", kinds=1)
def test_a_batch_a_gpu_cannot_hold_is_refused_naming_the_settings_and_the_gpu(tmp_path, eight_gpus):
    config, model = b16_run(tmp_path, 16384)
    with pytest.raises(ConfigError) as refusal:
        check_run_memory(config, model, eight_gpus, "bf16")
    message = str(refusal.value)
    assert "\n" not in message and message.startswith("run.memory_limit: the model needs about")
    assert "training on a batch of 2048 per GPU, bf16/fp16 autocast" in message
    assert "on cuda:0 (86.6M parameters" in message and f"free on cuda:0 ({GPU})" in message
    assert "--batch-size 16384 with --grad-accum 1 over 8 processes makes micro-batches of 2048 per process" in message
    config, model = b16_run(tmp_path, 16384, grad_accum=4)  # what the refusal suggests: 512 per GPU again
    check_run_memory(config, model, eight_gpus, "bf16")


@pytest.mark.unit
@pytest.mark.fault("bad-config", kinds=1)
def test_a_cpu_run_is_held_against_the_hosts_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(budget, "available_memory", lambda: 64 * 2**30)
    config, model = b16_run(tmp_path, 256)
    with pytest.raises(ConfigError) as refusal:
        check_run_memory(config, model, Processes(), "fp32")
    message = str(refusal.value)
    assert "\n" not in message and "training on a batch of 256" in message
    assert "(50% of the 64 GiB of memory available)" in message and "pass --grad-checkpointing" in message
    config.run.grad_checkpointing = True  # keeps a block's input per layer: the batch fits
    check_run_memory(config, model, Processes(), "fp32")


@pytest.mark.unit
@pytest.mark.parametrize(
    "changes", [{}, {"attn_dropout": 0.1}, {"pos_embed": "relative_bias"}, {"pos_embed": "relative"}]
)
def test_the_attention_kernel_is_the_one_torch_picks_on_the_cpu(changes):
    """Each attention call of a training step asks torch which kernel it runs (sdp_utils' own choice):
    the estimate counts the (tokens x tokens) weights exactly where that is the written-out softmax."""
    config = config_for("mu/4", image_size=16, dim=32, depth=2, num_heads=4, mlp_dim=64, num_classes=3, **changes)
    model, choices, attend = create_untrained(config).train(), set(), F.scaled_dot_product_attention

    def recorded(q, k, v, attn_mask=None, dropout_p=0.0, **kwargs):
        choices.add(torch._fused_sdp_choice(q, k, v, attn_mask, dropout_p) != torch.nn.attention.SDPBackend.MATH.value)
        return attend(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(F, "scaled_dot_product_attention", recorded)
        model(torch.randn(2, 3, 16, 16)).sum().backward()
    assert choices == {budget.attention_is_fused(config, torch.device("cpu"), training=True, half=False)}


@pytest.mark.integration
@pytest.mark.parametrize("precision, checkpointed", [("fp32", False), ("bf16", False), ("fp32", True)])
def test_the_training_estimate_bounds_the_measured_peak_of_a_small_run(precision, checkpointed):
    """A ViT whose attention weights would dwarf everything else (257 tokens of width 32), trained a
    step on the CPU with the fused kernel, in fp32 and under bf16 autocast, and with gradient
    checkpointing: the estimate is at least the measured memory and at most half as much again."""
    torch.set_num_threads(1)
    config = config_for("mu/4", image_size=64, dim=32, depth=2, num_heads=4, mlp_dim=128, num_classes=10)
    model, batch = create_untrained(config), 32
    model.set_grad_checkpointing(checkpointed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    images, labels = torch.randn(batch, 3, 64, 64), torch.randint(10, (batch,))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()

    step()  # Adam's moments exist from here on
    parameters = sum(p.numel() for p in model.parameters())
    measured = 12 * parameters + images.numel() * 4 + cpu_peak_bytes(step)  # weights, moments, the batch
    estimate = budget.memory_needed(
        config, batch, training=True, fused_attention=True, half=precision == "bf16", checkpointed=checkpointed
    )
    print(f"{precision} checkpointed={checkpointed}: estimate / measured = {estimate / measured:.3f}")
    assert measured <= estimate <= 1.5 * measured, (estimate, measured)
