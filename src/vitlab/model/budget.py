"""How much memory a model needs, counted from its config before anything is built.

A config of a kilobyte can ask for terabytes (`"depth": 1000000`); `check_memory` compares the
parameter count and the activations of one batch with a limit, `DEFAULT_FRACTION` of the memory
available, and refuses in one line naming both. The counts are the model's own (tested against
`sum(p.numel())`); activations are an estimate of the largest tensors alive at once.
"""

from __future__ import annotations

from pathlib import Path

from vitlab.errors import ConfigError

from .axial import AxialConfig
from .bit import BiTConfig
from .config import ViTConfig
from .resnet import ResNetConfig

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
def _resnet_parameters(config: ResNetConfig, in_channels: int) -> int:
    """Mirrors resnet.py: stem, bottleneck units (a projection on each stage's first), GroupNorms."""
    norm = 2  # GroupNorm weight and bias per channel
    total = config.width * in_channels * (49 if config.stem == "standard" else 9)
    total += 0 if config.preact else norm * config.width
    channels = config.width
    for stage, units in enumerate(config.layers):
        width = config.width * 2**stage
        for unit in range(units):
            total += channels * width + 9 * width * width + width * 4 * width  # 1x1, 3x3, 1x1 convolutions
            normed = (channels, width, width) if config.preact else (width, width, 4 * width)
            total += norm * sum(normed)
            if unit == 0:  # the projecting shortcut
                total += channels * 4 * width + (0 if config.preact else norm * 4 * width)
            channels = 4 * width
    return total + (norm * channels if config.preact else 0)


def parameter_count(config: ViTConfig | BiTConfig) -> int:
    """Parameters the model built from `config` has, without building it."""
    if isinstance(config, BiTConfig):
        trunk = _resnet_parameters(config.resnet, config.in_channels)
        return trunk + (config.feature_dim + 1) * config.num_classes
    dim, inner, mlp = config.dim, config.num_heads * config.attn_head_dim, config.mlp_dim
    patch = config.patch_size**2
    if config.backbone is not None:
        total = _resnet_parameters(config.backbone, config.in_channels) + config.backbone.out_channels * patch * dim
    else:
        total = config.in_channels * patch * dim
    total += dim + dim * config.num_prefix_tokens  # patch bias, class token
    tokens = config.num_patches + config.num_prefix_tokens
    gh, gw = config.grid_size
    table = {
        "learned": tokens * dim,
        "2d": (gh + gw) * (dim // 2) + config.num_prefix_tokens * dim,
        "none": 0,
        "sincos": 0,
        "relative": 0,
        "relative_bias": 0,
    }[config.pos_embed]
    total += table * (config.depth if config.pos_embed_at == "every_layer" else 1)  # Table 8's columns
    block = 4 * dim + dim * 3 * inner + inner * dim + dim + 2 * dim * mlp + mlp + dim
    block += 3 * inner if config.qkv_bias else 0
    if config.pos_embed == "relative_bias":
        block += ((2 * gh - 1) * (2 * gw - 1) + 3) * config.num_heads
    if config.pos_embed == "relative":  # one embedding per 1-D offset (Appendix D.4)
        block += (2 * tokens - 1) * config.attn_head_dim
    if isinstance(config, AxialConfig):  # a row and a column sub-block per layer, each a ViT block (App. D.6)
        block *= 2
    total += config.depth * block + 2 * dim  # encoder blocks, final norm
    width = config.dim * config.num_patches if config.pool == "flatten" else dim
    for hidden in (*([config.representation_size] if config.representation_size else []), *config.head_hidden):
        total += (width + 1) * hidden
        width = hidden
    return total + (width + 1) * config.num_classes


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
            f"{name}the model needs about {_gib(needed)} ({parameter_count(config) / 1e6:,.1f}M parameters{batch}), "
            f"above the limit of {_gib(limit)} ({which}); raise it with memory_limit= or --memory-limit GIB"
            + (", or hold fewer input images at once (fewer workers, a smaller batch)" if in_flight else "")
        )
