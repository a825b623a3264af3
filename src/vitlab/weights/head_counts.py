"""The head count of timm and torchvision ViT state dicts, which do not record it.

The shapes give width, depth and MLP size but not how the width splits into heads, and the two
libraries define architectures alike in those that differ in heads (timm: width 768, depth 12,
MLP 3072 with 12 and with 16 heads). data/head_counts.json lists every architecture timm and
torchvision define that vitlab can hold, with its signature (all the shapes show of it) and its head
count. A signature for which the table names exactly one head count gets it, and the log says so;
any other asks for num_heads=. The table is generated from the libraries' own model definitions:

    python -m vitlab.weights.head_table   # rewrites src/vitlab/weights/data/head_counts.json
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vitlab.errors import CheckpointError

from .keys import count_blocks, patch_conv_sizes, require

log = logging.getLogger("vitlab")

TABLE_FILE = Path(__file__).parent / "data" / "head_counts.json"
REGENERATE = "python -m vitlab.weights.head_table"
TIMM_POOLS = ("token", "avg", "max", "avgmax", "map")  # the global_pool values vitlab's ViT computes


@dataclasses.dataclass(frozen=True)
class Signature:
    """Everything a ViT state dict (in vitlab's key names) shows of its architecture."""

    library: str  # "timm" or "torchvision": each library's table answers for its own files
    patch_size: int
    dim: int
    depth: int
    mlp_dim: int
    class_token: bool
    fc_norm: bool
    qkv_bias: bool
    representation_size: int | None
    backbone: bool  # a hybrid: a ResNet cuts the patches
    pre_norm: bool  # CLIP's norm_pre before the blocks
    attn_pool: bool  # a MAP head (SigLIP's)
    gated_mlp: bool  # fc1 gives twice what fc2 takes: a gate and a value (SwiGLU, DINOv2-giant's)

    def describe(self) -> str:
        return (
            f"{self.library} width {self.dim}, depth {self.depth}, MLP {self.mlp_dim}, patch {self.patch_size}, "
            f"{'class token' if self.class_token else 'no class token'}{', fc_norm' if self.fc_norm else ''}"
            f"{', hybrid' if self.backbone else ''}{', norm_pre' if self.pre_norm else ''}"
            f"{', MAP head' if self.attn_pool else ''}{', gated MLP' if self.gated_mlp else ''}"
        )


def read_signature(state: Mapping[str, Any], library: str, source: str) -> Signature:
    """The signature of a state dict already renamed to vitlab's keys (tensors or meta tensors)."""
    dim, _, patch = patch_conv_sizes(require(state, "patch_embed.proj.weight", source), source)
    representation = state["pre_logits.0.weight"].shape[0] if "pre_logits.0.weight" in state else None
    fc1, fc2 = require(state, "blocks.0.mlp.fc1.weight", source), require(state, "blocks.0.mlp.fc2.weight", source)
    return Signature(
        library=library,
        patch_size=patch,
        dim=dim,
        depth=count_blocks(state, r"blocks\.(\d+)\.", source),
        mlp_dim=fc2.shape[1],
        class_token="cls_token" in state,
        fc_norm="fc_norm.weight" in state,
        qkv_bias="blocks.0.attn.qkv.bias" in state,
        representation_size=representation,
        backbone=any(key.startswith("patch_embed.backbone.") for key in state),
        pre_norm="norm_pre.weight" in state,
        attn_pool="attn_pool.latent" in state,
        gated_mlp=fc1.shape[0] == 2 * fc2.shape[1],
    )


@dataclasses.dataclass(frozen=True)
class Behaviour:
    """What an architecture computes that its shapes do not show."""

    num_heads: int
    act: str  # vitlab's name: "gelu" (exact), "gelu_tanh" or "quick_gelu"
    norm_eps: float  # timm's ViTs 1e-6, its CLIP towers torch's default 1e-5
    block: str  # "pre-norm" (the paper's Eq. 2-3) or the library's class of another kind
    global_pool: str  # the library's pooling: "token" or "avg"


@functools.lru_cache(maxsize=1)
def head_table() -> dict[Signature, dict[Behaviour, list[str]]]:
    """signature -> {behaviour: the architectures that have it}, from the committed data file."""
    document = json.loads(TABLE_FILE.read_text())
    table: dict[Signature, dict[Behaviour, list[str]]] = {}
    names = {field.name for field in dataclasses.fields(Behaviour)}
    for entry in document["architectures"]:
        behaviour = Behaviour(**{key: entry[key] for key in names})
        table.setdefault(Signature(**entry["signature"]), {}).setdefault(behaviour, []).append(entry["model"])
    return table


def table_choice(signature: Signature, num_heads: int, field: str, source: str) -> Any:
    """The `field` ("act" or "norm_eps") of the table's architectures of this signature and head
    count (None if there are none); architectures that differ in it ask for it by name."""
    values = sorted({getattr(b, field) for b in head_table().get(signature, {}) if b.num_heads == num_heads})
    if len(values) > 1:
        raise CheckpointError(
            f"{source}: {signature.library} defines {signature.describe()} with {num_heads} heads and "
            f"each of {', '.join(map(str, values))}; pass {field}="
        )
    return values[0] if values else None


def behaviour_of_model(name: str) -> Behaviour | None:
    """What the table records of a named architecture (e.g. timm's "vit_base_patch16_224"), if it has it."""
    for behaviours in head_table().values():
        for behaviour, models in behaviours.items():
            if name in models:
                return behaviour
    return None


def models_of(signature: Signature) -> list[str]:
    """Every architecture of the table with this signature, whatever its head count."""
    return sorted(name for models in head_table().get(signature, {}).values() for name in models)


def table_versions() -> dict[str, str]:
    return json.loads(TABLE_FILE.read_text())["generated_from"]


def architecture(signature: Signature, source: str) -> Behaviour:
    """The one behaviour (head count, activation, ...) the table names for this signature; anything
    else, and an architecture vitlab's ViT does not compute, is one line asking for num_heads=."""
    found = head_table().get(signature, {})
    if not found:
        raise CheckpointError(
            f"{source}: the weights do not record the head count and no {signature.library} architecture has "
            f"their signature ({signature.describe()}); pass num_heads="
        )
    if len(found) > 1:
        choices = "; ".join(
            f"{b.num_heads} heads, {b.act}, LayerNorm eps {b.norm_eps:g}, {b.block}, pool {b.global_pool} in "
            f"{_names(models)}"
            for b, models in sorted(found.items(), key=lambda item: (item[0].num_heads, item[0].act))
        )
        acts = "".join(f" and {field}=" for field in ("act", "norm_eps") if len({getattr(b, field) for b in found}) > 1)
        raise CheckpointError(
            f"{source}: the weights do not record the head count and {signature.library} defines "
            f"{signature.describe()} in {len(found)} ways ({choices}); pass num_heads={acts}"
        )
    ((behaviour, models),) = found.items()
    if behaviour.block != "pre-norm" or behaviour.global_pool not in TIMM_POOLS:
        raise CheckpointError(
            f"{source}: the one {signature.library} architecture of this signature ({_names(models)}) has "
            f"{behaviour.block} blocks and pool {behaviour.global_pool!r}, which vitlab's ViT does not compute"
        )
    log.info(
        "%s: %d heads and %s, as %s of this signature (%s); pass num_heads= for another",
        source,
        behaviour.num_heads,
        behaviour.act,
        _names(models),
        signature.describe(),
    )
    return behaviour


def _names(models: list[str], shown: int = 3) -> str:
    more = f" and {len(models) - shown} more" if len(models) > shown else ""
    return ", ".join(models[:shown]) + more


# -- what vitlab's ViT cannot hold ---------------------------------------------------------------
# (pattern on a timm key, what it is); the first key that matches names the refusal.
UNHOLDABLE = [
    (r"\.mlp\.fc1_[gx]\.", "a SwiGLU MLP (mlp.fc1_g/fc1_x)"),
    (r"^attn_pool\.(q_norm|k_norm|pos_embed)", "a MAP head with qk-norm or its own position embedding"),
    (r"^patch_embed\.norm\.", "a norm after the patch embedding (patch_embed.norm)"),
    (r"\.mlp\.norm\.", "a norm inside the MLP (mlp.norm)"),
    (r"\.attn\.norm\.", "a norm inside attention (attn.norm)"),
    (r"\.(attns|ffns)\.\d", "parallel blocks (attns/ffns)"),
    (r"\.(in_proj|in_norm|attn_out_proj|mlp_out_proj|mlp_bias)\b", "fused parallel blocks (in_proj)"),
    (r"(lambda_[qk]\d|sub_norm)", "differential attention (lambda_q/k, sub_norm)"),
    (r"\.gamma_[12]$", "timm's Eva block (gamma_1/gamma_2), as its rotary-embedding (rope) ViTs use"),
    (r"^patch_embed\.backbone\.(?!(stem|stages|conv|norm)\.)", "a hybrid backbone other than ResNetV2"),
]
TIMM_KEYS = re.compile(
    r"^(cls_token|reg_token|pos_embed|patch_embed\.proj\.(weight|bias)|patch_embed\.backbone\..+"
    r"|blocks\.\d+\.(norm1|norm2|attn\.qkv|attn\.proj|attn\.q_norm|attn\.k_norm|mlp\.fc1|mlp\.fc2)\.(weight|bias)"
    r"|dist_token|blocks\.\d+\.ls[12]\.gamma|(norm|norm_pre|fc_norm|head|head_dist|pre_logits\.fc)\.(weight|bias)"
    r"|attn_pool\.latent|attn_pool\.(q|kv|proj|norm|mlp\.fc1|mlp\.fc2)\.(weight|bias))$"
)


def refuse_unholdable(state: Mapping[str, Any], source: str) -> None:
    """One CheckpointError naming what a timm ViT has that vitlab's ViT does not."""
    for pattern, what in UNHOLDABLE:
        keys = [key for key in state if re.search(pattern, key)]
        if keys:
            raise CheckpointError(f"{source}: vitlab's ViT cannot hold {what} (key {keys[0]})")
    fc1, fc2 = state.get("blocks.0.mlp.fc1.weight"), state.get("blocks.0.mlp.fc2.weight")
    if fc1 is not None and fc2 is not None and fc1.shape[0] not in (fc2.shape[1], 2 * fc2.shape[1]):
        raise CheckpointError(  # a plain MLP, or timm's SwiGLUPacked: fc1 holds the gate and the value
            f"{source}: vitlab's ViT cannot hold an MLP whose fc1 gives {fc1.shape[0]} features and fc2 takes "
            f"{fc2.shape[1]} (neither equal nor a gate and a value)"
        )
    if "blocks.0.attn.q_norm.weight" in state and "blocks.0.attn.q_norm.bias" not in state:
        raise CheckpointError(f"{source}: vitlab's ViT cannot hold a qk-norm without bias (an RMSNorm q_norm)")
    if ("norm_pre.weight" in state) == ("patch_embed.proj.bias" in state):
        raise CheckpointError(  # timm's VisionTransformer: bias=not pre_norm
            f"{source}: timm's ViT has norm_pre exactly when its patch projection has no bias; these weights have "
            f"{'both' if 'norm_pre.weight' in state else 'neither'}"
        )
    unknown = sorted(key for key in state if not TIMM_KEYS.match(key))
    if unknown:
        raise CheckpointError(f"{source}: parameters vitlab's ViT has no place for: {', '.join(unknown[:8])}")
