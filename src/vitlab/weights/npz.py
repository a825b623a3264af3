"""Google's official vit_jax / AugReg `.npz` checkpoints: read (architecture inferred) and write.

The file is the Flax parameter tree flattened with '/'. Flax layouts differ from PyTorch's:
Dense kernels are (in, out), the patch conv is (P, P, C, D), and attention projections keep the
heads as an axis: query/key/value kernels (D, heads, head_dim), out kernel (heads, head_dim, D).

Numerics of the reference code (models_vit.py): Flax's nn.gelu is the tanh approximation,
LayerNorm epsilon is 1e-6, a GAP model has no `cls` and normalises every token before the mean,
and E_pos is resampled with scipy.ndimage.zoom(order=1) ("linear_zoom").

big_vision (models/vit.py) writes the same modules under `params/`, with E_pos as a top-level
`pos_embedding` added to the patches before its pool_type "tok" prepends the class token (so the
class token has no position vector), no `cls` for "gap", and, with scan=True, all blocks as one
`Transformer/encoderblock` whose arrays carry a leading depth axis.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitlab.errors import CheckpointError, ConfigError, RefusedFileError
from vitlab.memory.budget import DEFAULT_FRACTION, available_memory, check_memory
from vitlab.model import VisionTransformer, ViTConfig
from vitlab.model.config import PositionEmbeddingKind
from vitlab.npy_files import read_npz

from .build import build_model
from .keys import count_blocks
from .position_grid import fixed_position_embedding, infer_image_size, position_layout
from .preprocessing import VIT_JAX_PREPROCESSING, describe, log_preprocessing

log = logging.getLogger("vitlab")


@dataclasses.dataclass(frozen=True)
class BlockNames:
    """Module names inside `Transformer/encoderblock_{i}`: Flax numbers modules as it meets them."""

    norm1: str
    attn: str
    norm2: str
    mlp: str


RELEASED = BlockNames("LayerNorm_0", "MultiHeadDotProductAttention_1", "LayerNorm_2", "MlpBlock_3")
CURRENT = BlockNames("LayerNorm_0", "MultiHeadDotProductAttention_0", "LayerNorm_1", "MlpBlock_0")

# plain; a saved optimizer state; big_vision; the image tower of big_vision's two-tower models (LiT, SigLIP)
PREFIXES = ("", "opt/target/", "params/", "params/img/", "img/")
TOWERS = ("params/img/", "img/")
# big_vision's parts vitlab's ViT has no place for, named when a file has them.
UNHOLDABLE = {"MAPHead_0/": "a MAP attention-pool head (big_vision pool_type 'map')"}
POS_EMBED_KEYS = ("Transformer/posembed_input/pos_embedding", "pos_embedding")  # vit_jax; big_vision


# -- layout conversions: (flax -> torch, torch -> flax) ------------------------------------------
def _same(array: np.ndarray) -> np.ndarray:
    return array


def _dense(array: np.ndarray) -> np.ndarray:
    return array.T  # (in, out) <-> (out, in)


def _conv_to_torch(kernel: np.ndarray) -> np.ndarray:
    return kernel.transpose(3, 2, 0, 1)  # (P, P, C, D) -> (D, C, P, P)


def _conv_to_flax(weight: np.ndarray) -> np.ndarray:
    return weight.transpose(2, 3, 1, 0)


Convert = tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]
SAME: Convert = (_same, _same)
DENSE: Convert = (_dense, _dense)
CONV: Convert = (_conv_to_torch, _conv_to_flax)

# (flax key, vitlab key, conversion); a missing optional entry means the option is off.
TOP_LEVEL = [
    ("embedding/kernel", "patch_embed.proj.weight", CONV),
    ("embedding/bias", "patch_embed.proj.bias", SAME),
    ("cls", "cls_token", SAME),
    ("Transformer/encoder_norm/scale", "norm.weight", SAME),
    ("Transformer/encoder_norm/bias", "norm.bias", SAME),
    ("pre_logits/kernel", "pre_logits.0.weight", DENSE),
    ("pre_logits/bias", "pre_logits.0.bias", SAME),
    ("head/kernel", "head.weight", DENSE),
    ("head/bias", "head.bias", SAME),
]


def block_table(names: BlockNames) -> list[tuple[str, str, Convert]]:
    return [
        (f"{names.norm1}/scale", "norm1.weight", SAME),
        (f"{names.norm1}/bias", "norm1.bias", SAME),
        (f"{names.attn}/out/bias", "attn.proj.bias", SAME),
        (f"{names.norm2}/scale", "norm2.weight", SAME),
        (f"{names.norm2}/bias", "norm2.bias", SAME),
        (f"{names.mlp}/Dense_0/kernel", "mlp.fc1.weight", DENSE),
        (f"{names.mlp}/Dense_0/bias", "mlp.fc1.bias", SAME),
        (f"{names.mlp}/Dense_1/kernel", "mlp.fc2.weight", DENSE),
        (f"{names.mlp}/Dense_1/bias", "mlp.fc2.bias", SAME),
    ]


# -- reading ---------------------------------------------------------------------------------------
class FlaxParams:
    """The arrays of one checkpoint, remembering which were used so that none is silently skipped."""

    def __init__(self, arrays: dict[str, np.ndarray], source: str) -> None:
        self.source = source
        prefix = next((p for p in PREFIXES if f"{p}embedding/kernel" in arrays), None)
        if prefix is None:
            if "conv_root/kernel" in arrays:
                raise CheckpointError(f"{source}: hybrid (ResNet + ViT) checkpoints are not supported")
            raise CheckpointError(
                f"{source}: no embedding/kernel; not a ViT .npz (keys: {', '.join(list(arrays)[:8])})"
            )
        self.prefix = prefix
        if prefix in TOWERS:  # the text tower and the contrastive temperature are another model's
            others = sum(not key.startswith(prefix) for key in arrays)
            arrays = {key: value for key, value in arrays.items() if key.startswith(prefix)}
            log.info("%s: the image tower (%s) of a two-tower model; %d other arrays not read", source, prefix, others)
        self.arrays = arrays
        self.used: set[str] = set()
        self.scanned = self.has("Transformer/encoderblock/LayerNorm_0/scale")  # big_vision stacks layers

    def has(self, key: str) -> bool:
        return self.prefix + key in self.arrays

    def take(self, key: str) -> np.ndarray:
        self.used.add(self.prefix + key)
        return self.arrays[self.prefix + key]

    def block_prefix(self, index: int) -> str:
        return "Transformer/encoderblock/" if self.scanned else f"Transformer/encoderblock_{index}/"

    def take_block(self, index: int, key: str) -> np.ndarray:
        array = self.take(self.block_prefix(index) + key)
        return array[index] if self.scanned else array

    def depth(self) -> int:
        if self.scanned:
            return self.arrays[self.prefix + "Transformer/encoderblock/LayerNorm_0/scale"].shape[0]
        return count_blocks(self.arrays, rf"{re.escape(self.prefix)}Transformer/encoderblock_(\d+)/", self.source)

    def block_names(self) -> BlockNames:
        first = self.block_prefix(0)
        for names in (RELEASED, CURRENT):
            if self.has(f"{first}{names.attn}/query/kernel"):
                return names
        raise CheckpointError(f"{self.source}: no {first}{RELEASED.attn}/query/kernel or {CURRENT.attn}/query/kernel")

    def pos_embed_key(self) -> str | None:
        """The learned E_pos's key; None without one (big_vision's posemb 'sincos2d' or 'none')."""
        return next((key for key in POS_EMBED_KEYS if self.has(key)), None)

    def check_all_used(self) -> None:
        unused = sorted(set(self.arrays) - self.used)
        for part, what in UNHOLDABLE.items():
            named = [key for key in unused if key.startswith(self.prefix + part)]
            if named:
                raise CheckpointError(f"{self.source}: vitlab's ViT cannot hold {what} (key {named[0]})")
        if unused:
            raise CheckpointError(f"{self.source}: parameters vitlab's ViT has no place for: {', '.join(unused)}")


def read_arrays(path: Path, memory_limit: int | None = None) -> dict[str, np.ndarray]:
    """All arrays of an .npz, never unpickling, each member's header checked before it is allocated
    (vitlab.npy_files): what the zip directory says they unpack to must fit the memory limit, since a
    few megabytes of compressed zeros can unpack to gigabytes."""
    limit = memory_limit if memory_limit is not None else int(DEFAULT_FRACTION * available_memory())
    try:
        return read_npz(path, limit, "; raise it with memory_limit= or --memory-limit GIB")
    except RefusedFileError as error:
        raise CheckpointError(str(error)) from None


def infer_config(
    params: FlaxParams, names: BlockNames, image_size_hint: Any, name: str, pos_embed_hint: Any = None
) -> ViTConfig:
    """Everything an official npz holds: patch size, width, depth, heads, MLP size, grid, head, pooling."""
    patch, patch_w, channels, dim = params.arrays[params.prefix + "embedding/kernel"].shape
    if patch != patch_w:
        raise CheckpointError(f"{params.source}: non-square patches {patch}x{patch_w} are not supported")
    first = params.block_prefix(0)
    query = params.arrays[params.prefix + f"{first}{names.attn}/query/kernel"]
    num_heads, head_dim = query.shape[-2:]
    mlp_dim = params.arrays[params.prefix + f"{first}{names.mlp}/Dense_0/kernel"].shape[-1]
    class_token = params.has("cls")
    if not class_token:  # the file does not record the pooling; these keys are also big_vision's pool_type "0"
        log.info(
            "%s: no class token; read as global average pooling (vit_jax classifier 'gap', big_vision "
            "pool_type 'gap'); a big_vision pool_type '0' model has the same keys and is not told apart",
            params.source,
        )
    pos_key = params.pos_embed_key()
    representation = (
        params.arrays[params.prefix + "pre_logits/kernel"].shape[1] if params.has("pre_logits/kernel") else None
    )
    num_classes = params.arrays[params.prefix + "head/kernel"].shape[1] if params.has("head/kernel") else 0
    pos_embed: PositionEmbeddingKind = "learned"
    if pos_key is None:
        pos_embed, image_size = fixed_position_embedding(params.source, image_size_hint, pos_embed_hint)
    elif pos_key == POS_EMBED_KEYS[0]:  # vit_jax adds E_pos after the class token: always a slot
        num_positions = params.arrays[params.prefix + pos_key].shape[-2]
        image_size = infer_image_size(num_positions - int(class_token), patch, image_size_hint, params.source)
    else:
        num_positions = params.arrays[params.prefix + pos_key].shape[-2]
        image_size, _ = position_layout(num_positions, class_token, patch, image_size_hint, params.source)
    preprocessing = dataclasses.replace(VIT_JAX_PREPROCESSING)
    return ViTConfig(
        image_size=image_size,
        patch_size=patch,
        in_channels=channels,
        num_classes=num_classes,
        dim=dim,
        depth=params.depth(),
        num_heads=num_heads,
        mlp_dim=mlp_dim,
        head_dim=None if num_heads * head_dim == dim else head_dim,
        pool="token" if class_token else "gap",
        gap_norm="before_pool",
        pos_embed=pos_embed,
        representation_size=representation,
        qkv_bias=params.has(f"{first}{names.attn}/query/bias"),
        act="gelu_tanh",
        norm_eps=1e-6,
        pos_resample="linear_zoom",
        pos_resample_antialias=False,
        preprocessing=preprocessing,
        name=name,
    )


def to_state_dict(params: FlaxParams, names: BlockNames, depth: int, num_patches: int) -> dict[str, torch.Tensor]:
    state: dict[str, np.ndarray] = {}
    for flax_key, torch_key, (to_torch, _) in TOP_LEVEL:
        if params.has(flax_key):
            state[torch_key] = to_torch(params.take(flax_key))
    pos_key = params.pos_embed_key()
    if pos_key is not None:
        pos = params.take(pos_key).reshape(1, -1, state["norm.weight"].shape[0])
        if "cls_token" in state and pos.shape[1] == num_patches:
            # big_vision's pool_type "tok": E_pos over the patches, the class token added after it
            # with none of its own, i.e. a zero slot in vitlab's table.
            pos = np.concatenate([np.zeros_like(pos[:, :1]), pos], axis=1)
        state["pos_embed.weight"] = pos
    for index in range(depth):
        prefix = f"blocks.{index}."
        for flax_key, torch_key, (to_torch, _) in block_table(names):
            state[prefix + torch_key] = to_torch(params.take_block(index, flax_key))
        qkv = [params.take_block(index, f"{names.attn}/{part}/kernel") for part in ("query", "key", "value")]
        state[prefix + "attn.qkv.weight"] = np.concatenate([k.reshape(k.shape[0], -1).T for k in qkv])
        if params.has(params.block_prefix(index) + f"{names.attn}/query/bias"):
            biases = [params.take_block(index, f"{names.attn}/{part}/bias") for part in ("query", "key", "value")]
            state[prefix + "attn.qkv.bias"] = np.concatenate([b.reshape(-1) for b in biases])
        out = params.take_block(index, f"{names.attn}/out/kernel")  # (heads, head_dim, D)
        state[prefix + "attn.proj.weight"] = out.reshape(-1, out.shape[-1]).T
    params.check_all_used()
    return {key: torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32)) for key, value in state.items()}


def say_preprocessing(config: ViTConfig, source: str, overrides: dict[str, Any]) -> None:
    """The log line of an npz's preprocessing, unless one is given (build_model names that one)."""
    if "preprocessing" not in overrides:
        log_preprocessing(source, config.preprocessing, "vit_jax's evaluation: the layout records none")


def load_npz(path: str | Path, **overrides: Any) -> VisionTransformer:
    """An official vit_jax / AugReg / big_vision ViT .npz, with its architecture read from the arrays."""
    path = Path(path)
    params = FlaxParams(read_arrays(path, overrides.get("memory_limit")), str(path))
    names = params.block_names()
    config = infer_config(params, names, overrides.get("image_size"), path.stem, overrides.get("pos_embed"))
    say_preprocessing(config, str(path), overrides)
    check_memory(config, limit=overrides.get("memory_limit"), source=str(path))  # before a loop over its depth
    state_dict = to_state_dict(params, names, config.depth, config.num_patches)
    return build_model(config, state_dict, str(path), overrides)


# -- writing ---------------------------------------------------------------------------------------
LATER_PARTS = ("register_tokens", "distillation_token", "init_values", "qk_norm", "pre_norm", "gated_mlp")


def check_exportable(config: ViTConfig) -> None:
    """The official layout holds learned 1-D E_pos, class token or GAP (normalised before the mean),
    an optional tanh pre-logits layer and a linear head; anything else would be lost."""
    problems = []
    if config.pos_embed != "learned":
        problems.append(f"pos_embed={config.pos_embed!r} (only 'learned')")
    if config.pos_embed_at != "input":
        problems.append(f"pos_embed_at={config.pos_embed_at!r} (only 'input')")
    if config.pool not in ("token", "gap") or config.has_class_token != (config.pool == "token"):
        problems.append(f"pool={config.pool!r} with class_token={config.has_class_token} (only 'token' or 'gap')")
    if config.pool == "gap" and config.gap_norm != "before_pool":
        problems.append("gap_norm='after_pool' (vit_jax normalises before pooling)")
    if getattr(config, "backbone", None) is not None:
        problems.append("a hybrid ResNet backbone")
    if config.head_hidden:
        problems.append(f"head_hidden={config.head_hidden} (only a tanh representation layer)")
    for name in LATER_PARTS:  # the paper's layout predates them: only their defaults, which add nothing
        if getattr(config, name) != ViTConfig.__dataclass_fields__[name].default:
            problems.append(f"{name}={getattr(config, name)!r} (no place in vit_jax's layout)")
    if problems:
        raise ValueError("the official .npz layout cannot hold " + "; ".join(problems))


def warn_unrecorded(config: ViTConfig) -> None:
    """The layout holds weights only: what a reader takes as vit_jax's instead is said."""
    lost = []
    if config.preprocessing != VIT_JAX_PREPROCESSING:
        lost.append(f"preprocessing ({describe(config.preprocessing)}; readers assume vit_jax's)")
    if (config.pos_resample, config.pos_resample_antialias) != ("linear_zoom", False):
        lost.append(f"E_pos resampling {config.pos_resample} (readers resample as vit_jax, linear_zoom)")
    if config.class_names:
        lost.append(f"{len(config.class_names)} class names")
    if lost:
        log.warning("export_npz: the layout does not record %s", "; ".join(lost))


def export_npz(model: VisionTransformer, path: str | Path) -> Path:
    """Write the model in the layout of the released vit_jax checkpoints; returns the file written."""
    if type(model) is not VisionTransformer:  # an Axial-ViT's blocks have no place in the layout
        raise ConfigError(f"the official .npz layout holds the plain VisionTransformer, not a {type(model).__name__}")
    config = model.config
    check_exportable(config)
    if config.act != "gelu_tanh" or config.norm_eps != 1e-6:
        log.warning(
            "export_npz: the model uses act=%r, norm_eps=%g; vit_jax computes with tanh-GELU and 1e-6, "
            "so its outputs will differ slightly",
            config.act,
            config.norm_eps,
        )
    warn_unrecorded(config)
    state = {key: value.detach().to("cpu", torch.float32).numpy() for key, value in model.state_dict().items()}
    arrays: dict[str, np.ndarray] = {}
    for flax_key, torch_key, (_, to_flax) in TOP_LEVEL:
        if torch_key in state:
            arrays[flax_key] = to_flax(state[torch_key])
    arrays[POS_EMBED_KEYS[0]] = state["pos_embed.weight"]
    heads, head_dim, dim = config.num_heads, config.attn_head_dim, config.dim
    for index in range(config.depth):
        block = f"Transformer/encoderblock_{index}/"
        prefix = f"blocks.{index}."
        for flax_key, torch_key, (_, to_flax) in block_table(RELEASED):
            arrays[block + flax_key] = to_flax(state[prefix + torch_key])
        attn = f"{block}{RELEASED.attn}/"
        for part, weight in zip(("query", "key", "value"), np.split(state[prefix + "attn.qkv.weight"], 3)):
            arrays[f"{attn}{part}/kernel"] = weight.T.reshape(dim, heads, head_dim)
        if config.qkv_bias:
            for part, bias in zip(("query", "key", "value"), np.split(state[prefix + "attn.qkv.bias"], 3)):
                arrays[f"{attn}{part}/bias"] = bias.reshape(heads, head_dim)
        arrays[f"{attn}out/kernel"] = state[prefix + "attn.proj.weight"].T.reshape(heads, head_dim, dim)
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")  # numpy would add it anyway
    path.parent.mkdir(parents=True, exist_ok=True)
    # allow_pickle named: float32 arrays need no pickle, and no array key can be taken for the flag
    contiguous = {key: np.ascontiguousarray(value, dtype=np.float32) for key, value in arrays.items()}
    np.savez(path, allow_pickle=False, **contiguous)
    return path
