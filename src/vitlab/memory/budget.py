"""How much memory a model needs, counted before anything is allocated, and how much this process has.

A config of a kilobyte can ask for terabytes (`"depth": 1000000`); `check_memory` compares the
parameter count and the activations of one batch with a limit, `DEFAULT_FRACTION` of the memory
available (what Linux and the cgroup say, `available_memory`), and refuses in one line naming both.
The parameters are counted from the model itself, built on the meta device; activations are an
estimate of the largest tensors alive at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict, Unpack

import torch

from vitlab.errors import ConfigError
from vitlab.model.axial import AxialConfig
from vitlab.model.bit import BiTConfig
from vitlab.model.config import ViTConfig
from vitlab.model.registry import architecture_for

DEFAULT_FRACTION = 0.5  # of the memory available: room for the data, the optimiser, the rest of the process
# Of a GPU's free memory: room for cuBLAS's and NCCL's workspaces and the caching allocator's fragmentation.
GPU_FRACTION = 0.85
FLOAT_BYTES = 4
HALF_BYTES = 2
TRAINING_COPIES = 4  # weights, gradients and Adam's two moments


def available_memory() -> int:
    """Bytes this process may still allocate: MemAvailable, or the cgroup's limit when that is lower."""
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if available is None:
        import os

        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        limit, usage = (Path("/sys/fs/cgroup", name).read_text().strip() for name in ("memory.max", "memory.current"))
        if limit != "max":
            available = min(available, max(int(limit) - int(usage), 0))
    except (OSError, ValueError):
        pass
    return available


# -- parameter counts -------------------------------------------------------------------------------
def built_parameters(config: ViTConfig | BiTConfig) -> int:
    """Parameters of the model `config` builds, built on the meta device: nothing is allocated."""
    with torch.device("meta"):
        model = architecture_for(config)(config)
    return sum(p.numel() for p in model.parameters())


def parameter_count(config: ViTConfig | BiTConfig) -> int:
    """Parameters the model built from `config` has, counted from the model itself without
    allocating it. Every encoder layer has the same parameters, so a deep encoder is counted from
    builds of one and two layers: a config asking for a million layers builds three modules' worth."""
    depth = config.depth if isinstance(config, ViTConfig) else 0
    if depth <= 2:
        return built_parameters(config)
    one, two = (built_parameters(config.replace(depth=layers)) for layers in (1, 2))
    return one + (depth - 1) * (two - one)


# -- activations ------------------------------------------------------------------------------------
def attention_is_fused(config: ViTConfig | BiTConfig, device: torch.device, *, training: bool, half: bool) -> bool:
    """Whether scaled_dot_product_attention picks a fused kernel for `config` on `device`, one that
    keeps no (tokens x tokens) weights. torch's rules (sdp_utils): on CUDA, flash or memory-efficient
    attention take dropout and a bias, given a head dim aligned to 8 values (4 in fp32); on the CPU,
    the fused kernel takes neither dropout nor a bias that is trained (relative_bias, relative), and
    the softmax is written out instead."""
    if isinstance(config, BiTConfig):
        return True  # no attention
    if device.type == "cuda":
        return config.attn_head_dim % (8 if half else 4) == 0
    dropout = training and config.attn_dropout > 0
    return device.type == "cpu" and not dropout and config.pos_embed not in ("relative", "relative_bias")


def activation_bytes(
    config: ViTConfig | BiTConfig,
    batch_size: int,
    *,
    training: bool = False,
    keep_attention: bool = False,
    fused_attention: bool = False,
    half: bool = False,
    checkpointed: bool = False,
) -> int:
    """The largest activations of one batch: inference holds a block's tensors at a time (and every
    layer's attention weights when `keep_attention`, as rollout does); training keeps every block's.
    `fused_attention`: attention runs as one kernel that keeps no (tokens x tokens) weights
    (attention_is_fused; in training it saves its output and one statistic per row).
    `half`: bf16 / fp16 autocast, which keeps what the matmuls saved in 2 bytes, and the residual
    stream the norms read in 4 (autocast runs layer_norm in fp32). `checkpointed`: gradient
    checkpointing, which keeps each block's input and recomputes one block at a time in backward."""
    height, width = config.image_size
    pixels = batch_size * config.in_channels * height * width
    resnet = config.resnet if isinstance(config, BiTConfig) else config.backbone
    if resnet is not None:
        # Stage 1 runs at stride 4 with 4 x width channels; a unit keeps ~3 such maps alive.
        first = batch_size * (height // 4 + 1) * (width // 4 + 1) * 4 * resnet.width
        convolutions = 3 * first * (sum(resnet.layers) if training else 1)
    else:
        convolutions = 0
    if isinstance(config, BiTConfig):
        return FLOAT_BYTES * (pixels + convolutions)
    tokens = config.num_patches + config.num_prefix_tokens
    inner = config.num_heads * config.attn_head_dim
    value = HALF_BYTES if half else FLOAT_BYTES
    # Per token of a block: the residual stream twice (the norms' inputs), the norms' outputs, q, k and v,
    # and the MLP's hidden layer before and after its activation.
    per_token = FLOAT_BYTES * 2 * config.dim + value * (2 * config.dim + 3 * inner + 2 * config.mlp_dim)
    attention = batch_size * config.num_heads * tokens * tokens
    sub_blocks = 1
    if isinstance(config, AxialConfig):  # two sub-blocks; each token attends along its row (w) or column (h)
        gh, gw = config.grid_size
        attention, sub_blocks = batch_size * config.num_heads * tokens * (gh + gw), 2
    weights = 0 if fused_attention else 2 * attention  # the softmax's logits and weights
    block = sub_blocks * batch_size * tokens * per_token + value * weights
    if config.pos_embed == "relative":  # the queries' logits against every 1-D offset
        block += value * batch_size * config.num_heads * tokens * (2 * tokens - 1)
    kept = config.depth * attention if keep_attention else 0
    if not training:
        return FLOAT_BYTES * (pixels + convolutions + kept) + block
    if checkpointed:  # the block recomputed in backward, and its gradients (half as much again, measured)
        inputs = config.depth * batch_size * tokens * config.dim
        return FLOAT_BYTES * (pixels + convolutions + kept + inputs) + block * 3 // 2
    return FLOAT_BYTES * (pixels + convolutions + kept) + config.depth * block


class Step(TypedDict, total=False):
    """How a training step computes, beyond its batch: memory_needed's settings of that name."""

    fused_attention: bool
    half: bool
    checkpointed: bool
    shards: int


def memory_needed(
    config: ViTConfig | BiTConfig,
    batch_size: int = 1,
    *,
    training: bool = False,
    keep_attention: bool = False,
    fused_attention: bool = False,
    half: bool = False,
    checkpointed: bool = False,
    shards: int = 1,
) -> int:
    """The model's weights (with their gradients and Adam's moments in training) and one batch's
    activations (activation_bytes). `shards`: processes the weights, gradients and moments are spread
    over (FSDP), each of which also gathers the weights it computes with, in the compute type; `half`
    without shards: autocast's copies of the weights."""
    parameters = parameter_count(config)
    copies = TRAINING_COPIES if training else 1
    held = FLOAT_BYTES * copies * parameters // shards
    if shards > 1:
        held += (HALF_BYTES if half else FLOAT_BYTES) * parameters
    elif half:
        held += HALF_BYTES * parameters
    return held + activation_bytes(
        config,
        batch_size,
        training=training,
        keep_attention=keep_attention,
        fused_attention=fused_attention,
        half=half,
        checkpointed=checkpointed,
    )


def batches_in_flight(
    batch_size: int, image_size: tuple[int, int], workers: int, value_bytes: int = FLOAT_BYTES, prefetch: int = 2
) -> int:
    """Bytes of the (batch, 3, H, W) input batches a DataLoader holds at once: `prefetch` (torch's
    default prefetch_factor) decoded ahead by each of its worker processes, and the one in use."""
    height, width = image_size
    return (prefetch * workers + 1) * batch_size * 3 * height * width * value_bytes


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / 2**30:.3g} GiB"


def check_memory(
    config: ViTConfig | BiTConfig,
    batch_size: int = 1,
    *,
    training: bool = False,
    keep_attention: bool = False,
    limit: int | None = None,
    source: str | None = None,
    in_flight: int = 0,
    device: torch.device | None = None,
    processes: int = 1,
    remedy: str = "",
    **step: Unpack[Step],
) -> None:
    """Refuse, in one ConfigError, a model and batch needing more than `limit` bytes (default:
    DEFAULT_FRACTION of the memory available); `memory_limit=` / `--memory-limit` raise it.
    `in_flight`: bytes of input images held beside the model (a DataLoader's: batches_in_flight).
    On a GPU (`device`), the model, its training state and the activations (memory_needed with the
    `step`'s settings) are compared with GPU_FRACTION of the GPU's free memory, and the input images, with the weights as built before they move there, with the host's.
    `processes`: the processes of a run on this machine (torchrun's LOCAL_WORLD_SIZE), each with a
    batch of `batch_size`; their host memory adds up. `remedy`: the settings that make the batch and
    how to shrink it, ahead of raising the limit."""
    parameters = parameter_count(config)
    model = memory_needed(config, batch_size, training=training, keep_attention=keep_attention, **step)
    what = f"{'training' if training else 'inference'} on a batch of {batch_size}"
    if device is not None and device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
        where = f"{_gib(free)} free on {device} ({torch.cuda.get_device_name(device)})"
        numerics = "bf16/fp16 autocast" if step.get("half") else "fp32"
        shards = step.get("shards", 1)
        spread = f", sharded over {shards} processes" if shards > 1 else ""
        need = (
            f"about {_gib(model)} on {device} ({parameters / 1e6:,.1f}M parameters, {what} per GPU, {numerics}{spread})"
        )
        _refuse_above(
            model, limit, int(GPU_FRACTION * free), f"{GPU_FRACTION:.0%} of the {where}", source, need, remedy
        )
        model = FLOAT_BYTES * parameters  # built on the host before it moves to the GPU
    if processes > 1:
        what += f" in each of {processes} processes on this machine"
    needed = processes * (model + in_flight)
    if in_flight:
        what += f", {_gib(processes * in_flight)} of it the input images held at once"
    available = available_memory() if limit is None else 0
    _refuse_above(
        needed,
        limit,
        int(DEFAULT_FRACTION * available),
        f"{DEFAULT_FRACTION:.0%} of the {_gib(available)} of memory available",
        source,
        f"about {_gib(needed)} ({parameters / 1e6:,.1f}M parameters, {what})",
        remedy,
        ", or hold fewer input images at once (fewer workers, a smaller batch)" if in_flight else "",
    )


def _refuse_above(
    needed: int,
    limit: int | None,
    default: int,
    default_name: str,
    source: str | None,
    need: str,
    remedy: str,
    hint: str = "",
) -> None:
    """ConfigError when `needed` is above `limit` (memory_limit), or above `default` when no limit is set."""
    which = default_name if limit is None else "memory_limit"
    limit = default if limit is None else limit
    if needed > limit:
        name = f"{source}: " if source else ""
        raise_it = f"{remedy}; or raise the limit" if remedy else "raise it"
        raise ConfigError(
            f"{name}the model needs {need}, above the limit of {_gib(limit)} ({which}); {raise_it} with memory_limit= or "
            f"--memory-limit GIB{hint}"
        )
