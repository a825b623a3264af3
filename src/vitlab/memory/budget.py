"""How much memory a model needs, counted before anything is allocated, and how much this process has.

A config of a kilobyte can ask for terabytes (`"depth": 1000000`); `check_memory` compares the
parameter count and the activations of one batch with a limit, `DEFAULT_FRACTION` of the memory
available (what Linux and the cgroup say, `available_memory`), and refuses in one line naming both.
The parameters are counted from the model itself, built on the meta device; activations are an
estimate of the largest tensors alive at once.
"""

from __future__ import annotations

from pathlib import Path

import torch

from vitlab.errors import ConfigError
from vitlab.model.axial import AxialConfig
from vitlab.model.bit import BiTConfig
from vitlab.model.config import ViTConfig
from vitlab.model.registry import architecture_for

DEFAULT_FRACTION = 0.5  # of the memory available: room for the data, the optimiser, the rest of the process
FLOAT_BYTES = 4
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
def activation_bytes(
    config: ViTConfig | BiTConfig, batch_size: int, *, training: bool = False, keep_attention: bool = False
) -> int:
    """The largest activations of one batch: inference holds a block's tensors at a time (and every
    layer's attention weights when `keep_attention`, as rollout does); training keeps every block's."""
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
    attention = batch_size * config.num_heads * tokens * tokens
    block = batch_size * tokens * (4 * config.dim + 3 * inner + 2 * config.mlp_dim) + 2 * attention
    if isinstance(config, AxialConfig):  # two sub-blocks; each token attends along its row (w) or column (h)
        gh, gw = config.grid_size
        attention = batch_size * config.num_heads * tokens * (gh + gw)
        block = 2 * batch_size * tokens * (4 * config.dim + 3 * inner + 2 * config.mlp_dim) + 2 * attention
    if config.pos_embed == "relative":  # the queries' logits against every 1-D offset
        block += batch_size * config.num_heads * tokens * (2 * tokens - 1)
    layers = config.depth if training else 1
    kept = config.depth * attention if keep_attention else 0
    return FLOAT_BYTES * (pixels + convolutions + layers * block + kept)


def memory_needed(
    config: ViTConfig | BiTConfig, batch_size: int = 1, *, training: bool = False, keep_attention: bool = False
) -> int:
    copies = TRAINING_COPIES if training else 1
    return FLOAT_BYTES * copies * parameter_count(config) + activation_bytes(
        config, batch_size, training=training, keep_attention=keep_attention
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
) -> None:
    """Refuse, in one ConfigError, a model and batch needing more than `limit` bytes (default:
    DEFAULT_FRACTION of the memory available); `memory_limit=` / `--memory-limit` raise it.
    `in_flight`: bytes of input images held beside the model (a DataLoader's: batches_in_flight)."""
    parameters = parameter_count(config)
    needed = memory_needed(config, batch_size, training=training, keep_attention=keep_attention) + in_flight
    if limit is None:
        available = available_memory()
        limit = int(DEFAULT_FRACTION * available)
        which = f"{DEFAULT_FRACTION:.0%} of the {_gib(available)} of memory available"
    else:
        which = "memory_limit"
    if needed > limit:
        name = f"{source}: " if source else ""
        batch = f", {'training' if training else 'inference'} on a batch of {batch_size}"
        if in_flight:
            batch += f", {_gib(in_flight)} of it the input images held at once"
        raise ConfigError(
            f"{name}the model needs about {_gib(needed)} ({parameters / 1e6:,.1f}M parameters{batch}), "
            f"above the limit of {_gib(limit)} ({which}); raise it with memory_limit= or --memory-limit GIB"
            + (", or hold fewer input images at once (fewer workers, a smaller batch)" if in_flight else "")
        )
