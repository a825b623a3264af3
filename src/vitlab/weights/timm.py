"""timm VisionTransformer state dicts (.pth / .pth.tar / .safetensors), alone or with what timm records.

timm's key names are vitlab's (its layering Attention -> Block -> VisionTransformer is the one
vitlab follows), except E_pos (`pos_embed`, a bare parameter, absent with pos_embed='none') and the
old representation layer (`pre_logits.fc`). Numerics: LayerNorm epsilon 1e-6, E_pos resampled
bicubic with antialiasing (timm's resample_abs_pos_embed). The weights do not record the head count,
the activation or the pooling: a timm folder's model_args or a training checkpoint's architecture
give them (TimmRecord), else the table of timm's architectures (head_counts.py) or num_heads= / act=.
Preprocessing comes from timm's pretrained_cfg (preprocessing.py), or is said to be assumed.
"""

from __future__ import annotations

import dataclasses
import logging
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vitlab.errors import CheckpointError
from vitlab.model import ConfigError, Preprocessing, ViTConfig
from vitlab.model.aliases import POOL_FROM_TIMM, TIMM_POOL
from vitlab.model.config import Activation, Pooling

from .head_counts import (
    Signature,
    architecture,
    behaviour_of_model,
    models_of,
    read_signature,
    refuse_unholdable,
    table_choice,
)
from .keys import rename_keys
from .position_grid import position_layout
from .preprocessing import from_timm_cfg, log_preprocessing, timm_pretrained_cfg, timm_tag_name

log = logging.getLogger("vitlab")

RULES = [
    (r"^pos_embed$", "pos_embed.weight"),
    (r"^pre_logits\.fc\.", "pre_logits.0."),
]
TIMM_PREPROCESSING = Preprocessing(
    mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=0.9, interpolation="bicubic", crop_mode="center"
)
TIMM_DEFAULT_IMAGE_SIZE = 224  # timm's VisionTransformer(img_size=224)


@dataclass
class TimmRecord:
    """What a timm folder (config.json) or a timm train.py checkpoint records beside the weights."""

    architecture: str | None = None  # timm's model name, without a tag
    model_args: dict[str, Any] = field(default_factory=dict)  # keyword arguments over the architecture's
    pretrained_cfg: dict[str, Any] | None = None
    origin: str = ""  # where pretrained_cfg was read, for the log
    global_pool: str | None = None
    label_names: list[str] | None = None


def is_timm_state_dict(state: Mapping[str, torch.Tensor]) -> bool:
    """timm's ViT keys: patch_embed.proj and blocks (fused parallel ones have no norm1: refused by name later),
    E_pos as a bare `pos_embed` or none at all."""
    has_blocks = any(key.startswith("blocks.0.") for key in state)
    return "patch_embed.proj.weight" in state and "pos_embed.weight" not in state and has_blocks


def timm_signature(state: Mapping[str, torch.Tensor], source: str) -> Signature:
    """What the shapes show of the architecture; refuses what vitlab's ViT cannot hold."""
    refuse_unholdable(state, source)
    return read_signature(rename_keys(state, RULES), "timm", source)


def table_activation(act: str) -> Activation:
    """A table activation as ViTConfig's type; one vitlab lacks is refused as ViTConfig refuses it."""
    for known in typing.get_args(Activation):
        if act == known:
            return known
    raise ConfigError(f"unknown act {act!r}; choose one of {typing.get_args(Activation)}")


def record_for_tag(tag: str, candidates: list[str], record: TimmRecord, source: str) -> TimmRecord:
    """The record of pretrained_tag=: its architecture (one of `candidates`, those the weights' shapes
    may be) and timm's pretrained_cfg of those weights."""
    name = timm_tag_name(tag, [record.architecture] if record.architecture else candidates, source)
    architecture_name = name.split(".")[0]
    return TimmRecord(
        architecture=architecture_name,
        model_args=record.model_args,
        pretrained_cfg=timm_pretrained_cfg(name, source),
        origin=f"timm's pretrained_cfg of {name}",
        global_pool=record.global_pool,
        label_names=record.label_names,
    )


@dataclasses.dataclass(frozen=True)
class Numerics:
    """What a timm file's shapes do not show, and where it came from."""

    num_heads: int
    act: Activation
    norm_eps: float
    origin: str  # of the head count
    table_pool: str | None  # the table's global_pool, where it names the architecture


def numerics(signature: Signature, record: TimmRecord, overrides: dict[str, Any], source: str) -> Numerics:
    """Heads, activation and LayerNorm epsilon: num_heads=, act= and norm_eps=, the record's
    model_args, its architecture in the table, else the table's one architecture of this signature."""
    args = record.model_args
    known = behaviour_of_model(record.architecture) if record.architecture else None
    num_heads = overrides.pop("num_heads", None) or args.get("num_heads")
    act_name, eps = overrides.get("act") or args.get("act_layer"), overrides.get("norm_eps")
    table_pool = known.global_pool if known is not None else None
    if num_heads is not None:
        origin = "num_heads=" if "num_heads" not in args else "model_args"
    elif known is not None:
        num_heads, origin = known.num_heads, f"timm's {record.architecture}"
    else:
        behaviour = architecture(signature, source)  # logs the architectures it names
        num_heads, origin = behaviour.num_heads, "the one timm architecture of these shapes"
        act_name, eps, table_pool = act_name or behaviour.act, eps or behaviour.norm_eps, behaviour.global_pool
    if known is not None:  # the architecture's own, which model_args change only by naming them
        act_name, eps = act_name or known.act, eps or known.norm_eps
    act_name = act_name or table_choice(signature, num_heads, "act", source)
    eps = eps or table_choice(signature, num_heads, "norm_eps", source)
    if act_name is None or eps is None:
        default = "silu" if signature.gated_mlp else "gelu"  # timm gates with SiLU wherever it registers one
        log.info(
            "%s: no timm architecture of these shapes has %d heads: %s and LayerNorm eps %g (timm's ViT "
            "defaults); pass act= and norm_eps= if not",
            source,
            num_heads,
            act_name or ("SiLU" if default == "silu" else "exact GELU"),
            eps or 1e-6,
        )
        act_name, eps = act_name or default, eps or 1e-6
    try:
        return Numerics(num_heads, table_activation(act_name), float(eps), origin, table_pool)
    except ConfigError:
        raise CheckpointError(f"{source}: act_layer {act_name!r} is not an activation vitlab's ViT has") from None


def pooling(signature: Signature, record: TimmRecord, table_pool: str | None, source: str) -> Pooling:
    """vitlab's pool of the weights: timm's recorded global_pool, else the table's, else what the
    keys imply (a class token without fc_norm: the token; fc_norm: the patch tokens' mean, said)."""
    recorded = record.model_args.get("global_pool", record.global_pool)
    if recorded is None:
        recorded = table_pool
    if recorded is None and signature.attn_pool:
        recorded = "map"
    if recorded is None and signature.class_token and signature.fc_norm:
        log.info("%s: a class token and fc_norm: timm's global_pool 'avg' ('max' and 'avgmax' look the same)", source)
        recorded = "avg"
    if recorded is None:
        recorded = "token" if signature.class_token else "avg"
    pool = POOL_FROM_TIMM.get(recorded) if isinstance(recorded, str) else None
    if pool is None or pool == "flatten":
        raise CheckpointError(f"{source}: timm's global_pool {recorded!r} is not a pooling vitlab's ViT has")
    if pool == "token" and not signature.class_token:
        raise CheckpointError(f"{source}: global_pool 'token' without a class token is not a timm model vitlab reads")
    if (pool == "map") != signature.attn_pool:
        said = "has no MAP head (attn_pool)" if pool == "map" else "has a MAP head (attn_pool) it would not use"
        raise CheckpointError(f"{source}: global_pool {recorded!r}, but the file {said}")
    return pool


def recorded_image_size(record: TimmRecord) -> Any:
    """The input size a timm record gives: model_args' img_size, else pretrained_cfg's input_size."""
    size = record.model_args.get("img_size")
    if size is None and record.pretrained_cfg and record.pretrained_cfg.get("input_size"):
        size = list(record.pretrained_cfg["input_size"][-2:])
    return size


def recorded_preprocessing(record: TimmRecord, source: str) -> tuple[Preprocessing, str]:
    if record.pretrained_cfg is not None:
        return from_timm_cfg(record.pretrained_cfg, source), record.origin
    return (
        dataclasses.replace(TIMM_PREPROCESSING),
        "assumed, timm's ViT default: pass pretrained_tag= (architecture.tag) for the weights' own",
    )


def regularisation(args: Mapping[str, Any]) -> dict[str, Any]:
    """The dropout settings of timm's model_args as ViTConfig fields (they change nothing in eval mode)."""
    dropout = float(args.get("proj_drop_rate", 0.0))
    return dict(
        dropout=dropout,
        embed_dropout=float(args.get("pos_drop_rate", 0.0)) == dropout,
        attn_dropout=float(args.get("attn_drop_rate", 0.0)),
        drop_path=float(args.get("drop_path_rate", 0.0)),
        head_dropout=float(args.get("drop_rate", 0.0)),
    )


def later_parts(state: Mapping[str, torch.Tensor], args: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Layer scale, qk-norm and norm_pre as ViTConfig fields, from the keys that hold them."""
    init_values = None
    if "blocks.0.ls1.gamma" in state:
        init_values = args.get("init_values")
        if init_values is None:
            init_values = 1e-5
            log.info(
                "%s: layer scale's init_values not recorded: 1e-5 (timm's LayerScale default); "
                "the gains themselves are the weights'",
                source,
            )
    return dict(
        init_values=init_values,
        qk_norm="blocks.0.attn.q_norm.weight" in state,
        pre_norm="norm_pre.weight" in state,
    )


def convert_timm(
    state: Mapping[str, torch.Tensor], source: str, overrides: dict[str, Any], record: TimmRecord | None = None
) -> tuple[ViTConfig, dict[str, torch.Tensor]]:
    """timm state dict -> (vitlab config, vitlab state dict); consumes num_heads= and pretrained_tag=."""
    record = record or TimmRecord()
    signature = timm_signature(state, source)
    tag = overrides.pop("pretrained_tag", None)
    if tag is not None:
        record = record_for_tag(tag, models_of(signature), record, source)
    found = numerics(signature, record, overrides, source)
    pool = pooling(signature, record, found.table_pool, source)
    hint = recorded_image_size(record) or overrides.get("image_size")
    state = rename_keys(state, RULES)
    image_size = trained_image_size(state, signature, hint, source)
    preprocessing, preprocessing_origin = recorded_preprocessing(record, source)
    num_classes = state["head.weight"].shape[0] if "head.weight" in state else 0
    names = record.label_names or None
    if names is not None and len(names) != num_classes:
        raise CheckpointError(f"{source}: label_names lists {len(names)} names for a head of {num_classes} classes")
    config = ViTConfig(
        image_size=image_size,
        patch_size=signature.patch_size,
        in_channels=state["patch_embed.proj.weight"].shape[1],
        num_classes=num_classes,
        dim=signature.dim,
        depth=signature.depth,
        num_heads=found.num_heads,
        mlp_dim=signature.mlp_dim,
        gated_mlp=signature.gated_mlp,
        pool=pool,
        class_token=signature.class_token,
        register_tokens=state["reg_token"].shape[1] if "reg_token" in state else 0,
        distillation_token="dist_token" in state,
        gap_norm="after_pool" if signature.fc_norm else "before_pool",
        representation_size=signature.representation_size,
        pos_embed="learned" if "pos_embed.weight" in state else "none",
        qkv_bias=signature.qkv_bias,
        act=found.act,
        norm_eps=found.norm_eps,
        pos_resample="bicubic",
        pos_resample_antialias=True,
        preprocessing=preprocessing,
        class_names=names,
        name=record.architecture or Path(source).stem,
        **regularisation(record.model_args),
        **later_parts(state, record.model_args, source),
    )
    log.info(
        "%s: timm ViT with %d heads (%s), %s, LayerNorm eps %g, %s pooling",
        source,
        found.num_heads,
        found.origin,
        found.act,
        found.norm_eps,
        {"token": "class-token", "none": "no"}.get(pool, TIMM_POOL[pool]),
    )
    if "preprocessing" not in overrides:  # else build_model names the given one
        log_preprocessing(source, preprocessing, preprocessing_origin)
    return config, state


def trained_image_size(state: dict[str, torch.Tensor], signature: Signature, hint: Any, source: str) -> Any:
    """The image size the weights were trained at, read from E_pos's length since timm files record none,
    giving E_pos in place the zero slots of the prefix tokens (class, distillation, registers) that timm leaves
    out (no_embed_class) so vitlab's layout holds."""
    image_size: Any
    if "pos_embed.weight" in state:
        registers = state["reg_token"].shape[1] if "reg_token" in state else 0
        prefix = int(signature.class_token) + int("dist_token" in state) + registers
        image_size, prefix_slots = position_layout(
            state["pos_embed.weight"].shape[1], prefix, signature.patch_size, hint, source
        )
        if prefix and not prefix_slots:  # timm's no_embed_class: E_pos of the prefix tokens is zero
            pos = state["pos_embed.weight"]
            state["pos_embed.weight"] = torch.cat([pos.new_zeros(1, prefix, pos.shape[-1]), pos], dim=1)
    else:  # timm's pos_embed='none': nothing records the size the weights were trained at
        image_size = hint or TIMM_DEFAULT_IMAGE_SIZE
        if hint is None:
            log.info("%s: no position embedding; image size %d assumed (timm's default)", source, image_size)
    return image_size
