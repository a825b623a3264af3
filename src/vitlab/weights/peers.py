"""What timm's and transformers' ViTs can hold, as allow-lists over ViTConfig's fields.

A writer for a peer carries the fields it lists; every other field must keep ViTConfig's default
(the plain ViT of the paper), so an option vitlab gains later is refused until a writer learns it.
Refusals are one ConfigError naming the option, raised before anything is written.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vitlab.model import ConfigError, VisionTransformer, ViTConfig

log = logging.getLogger("vitlab")

# Fields every writer carries as they are (the format records them).
ALWAYS = (
    "image_size",
    "patch_size",
    "in_channels",
    "num_classes",
    "dim",
    "depth",
    "num_heads",
    "mlp_dim",
    "qkv_bias",
    "preprocessing",
    "class_names",
    "name",
)


@dataclass(frozen=True)
class Peer:
    """One library's ViT: the values it holds per field, and fields it has no place for but that
    change no output in eval mode (written with a log line)."""

    name: str
    allowed: dict[str, tuple[Any, ...]]  # field -> the values the peer holds
    carried: tuple[str, ...] = ()  # further fields written as they are
    dropped: tuple[str, ...] = ()  # training-only settings the peer has no place for
    checks: tuple[Callable[[ViTConfig], str | None], ...] = field(default=())  # a reason, or None


def standard_head_dim(config: ViTConfig) -> str | None:
    if config.head_dim is not None and config.head_dim != config.dim // config.num_heads:
        return f"head_dim={config.head_dim} (its attention heads are dim/num_heads = {config.dim // config.num_heads} wide)"
    return None


def integer_mlp_ratio(config: ViTConfig) -> str | None:
    # timm builds the MLP as int(embed_dim * mlp_ratio) wide.
    if int(config.dim * (config.mlp_dim / config.dim)) != config.mlp_dim:
        return f"mlp_dim={config.mlp_dim} (timm's MLP is int(dim * mlp_ratio) wide)"
    return None


# timm's R+ViT hybrids (vision_transformer_hybrid.py) by the backbone's units per stage; the
# registered function builds the backbone, model_args give the transformer.
TIMM_HYBRID_BACKBONES = {
    (): "vit_tiny_r_s16_p8_224",
    (2, 2, 2, 2): "vit_small_r26_s32_224",
    (3, 4, 9): "vit_base_r50_s16_224",
    (3, 4, 6, 3): "vit_large_r50_s32_224",
}


def timm_hybrid_backbone(config: ViTConfig) -> str | None:
    """timm builds its hybrids' ResNetV2 itself: same units, stem and numerics, or a reason."""
    backbone = config.backbone
    if backbone is None:
        return None
    if backbone.layers not in TIMM_HYBRID_BACKBONES:
        return f"a ResNet backbone with units {backbone.layers} (timm's hybrids have {', '.join(map(str, TIMM_HYBRID_BACKBONES))})"
    timm_numerics = dict(
        preact=False,
        stem="standard",
        padding="same",
        width=64,
        num_groups=32,
        norm_eps=1e-5,
        weight_std="timm",
        weight_std_eps=1e-8,
    )
    wrong = [f"{k}={getattr(backbone, k)!r}" for k, v in timm_numerics.items() if getattr(backbone, k) != v]
    if wrong:
        # vit_jax standardises as (w - mean) / (std + 1e-5) with GroupNorm eps 1e-6: close, not equal.
        return (
            f"a hybrid backbone with {', '.join(wrong)} (timm's ResNetV2 standardises weights as "
            "(w - mean) / sqrt(var + 1e-8), GroupNorm eps 1e-5, SAME padding)"
        )
    return None


TIMM = Peer(
    name="timm",
    allowed={
        "pool": ("token", "gap", "max", "avgmax", "none", "map"),  # global_pool 'token', 'avg', ..., '', 'map'
        "pos_embed": ("learned", "none"),  # timm's pos_embed 'learn' / 'none', added at the input
        "act": ("gelu", "gelu_tanh", "quick_gelu", "silu"),
        "norm_eps": (1e-6,),  # timm's ViT LayerNorm; model_args cannot change its epsilon
        "representation_size": (None,),
        "head_hidden": ((),),
        "mlp_out_act": (False,),
    },
    carried=(
        "gap_norm",
        "dropout",
        "attn_dropout",
        "drop_path",
        "head_dropout",
        "head_dim",
        "pos_resample",
        "pos_resample_antialias",
        "backbone",
        "embed_dropout",
        "class_token",
        "init_values",
        "qk_norm",
        "pre_norm",
        "register_tokens",
        "distillation_token",  # written as timm's DeiT (timm_writer.DISTILLED_ARCHITECTURE)
        "gated_mlp",  # written as timm's DINOv2-giant (timm_writer.GATED_ARCHITECTURE)
    ),
    checks=(standard_head_dim, integer_mlp_ratio, timm_hybrid_backbone),
)

HF = Peer(
    name="hf",
    allowed={
        "pool": ("token",),  # ViTForImageClassification reads the class token
        "class_token": (None, True),
        "pos_embed": ("learned",),
        "act": ("gelu", "gelu_tanh", "quick_gelu"),
        "backbone": (None,),  # transformers has no ResNet + ViT hybrid
        "representation_size": (None,),  # its classifier has no pre-logits layer
        "head_hidden": ((),),
        "mlp_out_act": (False,),
    },
    carried=("norm_eps", "dropout", "attn_dropout", "head_dim", "gap_norm", "pos_resample", "pos_resample_antialias"),
    dropped=("drop_path", "head_dropout"),
    checks=(standard_head_dim,),
)

PEERS = {"timm": TIMM, "hf": HF}
HYBRID_REASONS = {"hf": "transformers has no ResNet + ViT model"}
WHAT = {
    "pool": "pooling",
    "class_token": "class token",
    "pos_embed": "position embedding",
    "act": "MLP activation",
    "norm_eps": "LayerNorm epsilon",
    "backbone": "ResNet backbone (hybrid)",
    "representation_size": "representation (pre-logits) layer",
    "head_hidden": "MLP head (the Keras example's)",
    "mlp_out_act": "activation after the MLP's second layer",
}


def check_peer(model: object, peer: Peer) -> ViTConfig:
    """The model's config if `peer` can hold it; otherwise a ConfigError naming the first option it cannot."""
    if type(model) is not VisionTransformer:
        kind = type(model).__name__
        raise ConfigError(
            f"--format {peer.name}: a {kind} is not a model vitlab writes for {peer.name}; "
            "only the plain VisionTransformer"
        )
    config: ViTConfig = model.config
    for name, values in peer.allowed.items():
        value = getattr(config, name)
        if value not in values:
            if name == "backbone":  # a hybrid: the one option whose value is a whole config
                raise ConfigError(
                    f"--format {peer.name}: a ResNet + ViT hybrid is not written for {peer.name} "
                    f"({HYBRID_REASONS[peer.name]})"
                )
            allowed = ", ".join(repr(v) for v in values)
            raise ConfigError(
                f"--format {peer.name}: {peer.name} cannot hold {name}={value!r} ({WHAT.get(name, name)}); it holds {allowed}"
            )
    for check in peer.checks:
        reason = check(config)
        if reason is not None:
            raise ConfigError(f"--format {peer.name}: {peer.name} cannot hold {reason}")
    known = set(ALWAYS) | set(peer.allowed) | set(peer.carried) | set(peer.dropped)
    for spec in dataclasses.fields(config):
        if spec.name in known:
            continue
        if spec.default is not dataclasses.MISSING:
            default = spec.default
        else:
            assert spec.default_factory is not dataclasses.MISSING  # every config field has a default
            default = spec.default_factory()
        if getattr(config, spec.name) != default:
            raise ConfigError(
                f"--format {peer.name}: option {spec.name}={getattr(config, spec.name)!r} has no place in {peer.name}'s ViT"
            )
    for name in peer.dropped:
        value = getattr(config, name)
        if value:
            log.info(
                "%s export: %s=%r is a training setting %s has no place for; not written",
                peer.name,
                name,
                value,
                peer.name,
            )
    return config
