"""Typed configuration of a Vision Transformer: every architecture and numerics choice in one place.

The three reference implementations differ in small numerical details (GELU flavour, LayerNorm
epsilon, where global average pooling normalises); a config records them so that a model loaded
from any source computes the numbers that source computes.
"""

from __future__ import annotations

import dataclasses
import numbers
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from vitlab.config_fields import (
    CROP_MODES,
    CROP_PCT_RULE,
    INTERPOLATIONS,
    STD_RULE,
    CropMode,
    Interpolation,
    check_fields,
    crop_pct_ok,
    literal_values,
    std_ok,
    unknown_keys,
)
from vitlab.errors import ConfigError

from .resnet import ResNetConfig  # a hybrid's backbone (the field `backbone`)

# timm's pools too: "max" and "avgmax" over the patch tokens, "none" (timm's '') keeps every token, "map"
# attends over the patch tokens with one learned query (SigLIP's head).
Pooling = Literal["token", "gap", "flatten", "max", "avgmax", "none", "map"]
PositionEmbeddingKind = Literal["learned", "none", "2d", "sincos", "relative", "relative_bias"]
PositionEmbeddingAt = Literal["input", "every_layer", "every_layer_shared"]
Activation = Literal["gelu", "gelu_tanh", "quick_gelu", "silu"]
GapNorm = Literal["before_pool", "after_pool"]
ResampleMode = Literal["bicubic", "bilinear", "linear_zoom", "bicubic_aligned"]

# The allowed values of each, from the one definition above: the checks below and the CLI's choices.
POOLINGS: tuple[str, ...] = typing.get_args(Pooling)
POSITION_EMBEDDINGS: tuple[str, ...] = typing.get_args(PositionEmbeddingKind)
# Table 8's columns: E_pos added once to the input (the default), one E_pos per layer added before
# that layer, or one E_pos added before every layer. The paper has the last two for 1-D and 2-D only.
POSITION_EMBEDDING_AT: tuple[str, ...] = typing.get_args(PositionEmbeddingAt)
PER_LAYER_POSITION_EMBEDDINGS = ("learned", "2d")
POOLED_MEANS = ("gap", "max", "avgmax")  # pools over the patch tokens, which gap_norm places the norm around
ACTIVATIONS: tuple[str, ...] = typing.get_args(Activation)
GAP_NORMS: tuple[str, ...] = typing.get_args(GapNorm)
RESAMPLE_MODES: tuple[str, ...] = typing.get_args(ResampleMode)


def as_pair(value: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    def whole(v: Any) -> bool:
        return isinstance(v, numbers.Integral) and not isinstance(v, bool)

    if whole(value):
        return (int(value), int(value))  # type: ignore[arg-type]
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(whole(v) for v in value):
        raise ConfigError(f"image_size: expected an int or (height, width), got {value!r}")
    return (int(value[0]), int(value[1]))


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    # A dict, not functools.cache: mypy checks a class key against Hashable through its instances' __hash__.
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def check(ok: bool, message: str) -> None:
    """ConfigError(message) unless ok: one line per rule keeps validate a readable list."""
    if not ok:
        raise ConfigError(message)


@dataclass
class Preprocessing:
    """How images are turned into model inputs; stored with the weights (as timm does)."""

    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)  # vit_jax maps pixels to [-1, 1]
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    crop_pct: float = 0.875
    interpolation: Interpolation = "bicubic"
    # None: vitlab's rule before the field existed, "center" for a square input and "squash" otherwise
    # (data.transforms.crop_mode_for); a value read from a peer's config is kept as it is.
    crop_mode: CropMode | None = None

    def __post_init__(self) -> None:
        try:
            check_fields(self, _hints(Preprocessing))
        except ConfigError as error:
            raise ConfigError(f"preprocessing.{error}") from None
        if not std_ok(self.std):
            raise ConfigError(f"std {STD_RULE}, got {self.std}")
        if not crop_pct_ok(self.crop_pct):
            raise ConfigError(f"crop_pct {CROP_PCT_RULE}, got {self.crop_pct}")
        if self.interpolation not in INTERPOLATIONS:
            raise ConfigError(f"unknown interpolation {self.interpolation!r}")
        if self.crop_mode is not None and self.crop_mode not in CROP_MODES:
            raise ConfigError(f"unknown crop_mode {self.crop_mode!r}; choose one of {CROP_MODES} or null")


@dataclass
class ViTConfig:
    """A ViT as in Dosovitskiy et al. (2021), Eq. 1-4, plus the options the paper's ablations use."""

    # Sizes (Table 1).
    image_size: tuple[int, int] = (224, 224)
    patch_size: int = 16
    in_channels: int = 3
    num_classes: int = 1000
    dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_dim: int = 3072
    head_dim: int | None = None  # width of one attention head; None means dim // num_heads
    # Hybrid (Sec. 3.1): patches are cut from this ResNet's feature map instead of the image.
    backbone: ResNetConfig | None = None
    # Pooling and heads (Sec. 3.1, 3.2, Appendix D.3).
    pool: Pooling = "token"
    class_token: bool | None = None  # None: a class token exactly when pool is "token" (the paper's two models)
    representation_size: int | None = None  # the pre-training head's tanh hidden layer
    head_hidden: tuple[int, ...] = ()  # extra GELU layers of an MLP head (the Keras example's head)
    # Position embedding (Table 8).
    pos_embed: PositionEmbeddingKind = "learned"
    pos_embed_at: PositionEmbeddingAt = "input"
    pos_resample: ResampleMode = "bicubic"
    pos_resample_antialias: bool = True
    # Regularisation (Appendix B.1).
    dropout: float = 0.0
    attn_dropout: float = 0.0
    drop_path: float = 0.0
    head_dropout: float = 0.0
    # `dropout` acts after every dense layer but qkv, and right after adding E_pos (Appendix B.1); the
    # Keras example drops neither after E_pos nor after the attention's output projection.
    embed_dropout: bool = True
    proj_dropout: bool = True
    qkv_bias: bool = True
    # Later ViTs' parts, as timm's VisionTransformer names them. init_values: layer scale (CaiT, DeiT III),
    # a learned per-channel gain on each residual branch starting at this value (None: none); qk_norm:
    # a LayerNorm on each head's queries and keys (ViT-22B); pre_norm: a LayerNorm on z_0 before the
    # blocks and no bias in the patch projection (CLIP's ViT).
    init_values: float | None = None
    qk_norm: bool = False
    pre_norm: bool = False
    # register tokens (Darcet et al. 2023, timm's reg_tokens): learned tokens after the class token that
    # give the attention somewhere other than background patches to store global information
    register_tokens: int = 0
    # DeiT's distillation token (timm's dist_token): a second class token, after the first, read by its own
    # head (head_dist); the logits are the mean of the two heads'
    distillation_token: bool = False
    # Numerics that differ between the reference implementations.
    act: Activation = "gelu"
    mlp_out_act: bool = False  # GELU after the MLP's second dense too (the Keras example's MLP)
    gated_mlp: bool = False  # act(gate) * value (SwiGLU with act "silu"), fc1 giving both: 2 x mlp_dim
    norm_eps: float = 1e-6
    # GAP: the encoder norm on every token, then the mean, as vit_jax and big_vision (the paper's Fig. 9
    # and Axial-ViT); "after_pool" is timm's fc_norm order, which timm's GAP weights load with.
    gap_norm: GapNorm = "before_pool"
    # What goes with the weights.
    preprocessing: Preprocessing = field(default_factory=Preprocessing)
    class_names: list[str] | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        self.image_size = as_pair(self.image_size)
        if isinstance(self.head_hidden, list):
            self.head_hidden = tuple(self.head_hidden)
        check_fields(self, _hints(type(self)))  # types first: the checks below compare numbers
        self.validate()

    # -- derived sizes -------------------------------------------------------------------------
    @property
    def attn_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.dim // self.num_heads

    @property
    def effective_patch_size(self) -> int:
        """Input pixels per token side: P, times the backbone's stride for a hybrid."""
        return self.patch_size * (self.backbone.stride if self.backbone is not None else 1)

    @property
    def grid_size(self) -> tuple[int, int]:
        """The token grid at the native resolution."""
        return self.grid_for(self.image_size)

    def grid_for(self, image_size: Sequence[int]) -> tuple[int, int]:
        """The token grid (rows, columns) of an input of `image_size` (height, width): every caller
        that maps tokens to pixels goes through here, so a hybrid's backbone stride is never forgotten."""
        height, width = (int(side) for side in image_size[-2:])
        patch = self.effective_patch_size
        if height % patch or width % patch:
            raise ValueError(
                f"an input of {height}x{width} pixels is not divisible by the effective patch size {patch}"
            )
        return (height // patch, width // patch)

    @property
    def num_patches(self) -> int:
        return self.grid_size[0] * self.grid_size[1]

    @property
    def has_class_token(self) -> bool:
        return self.class_token if self.class_token is not None else self.pool == "token"

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: the class token, then the distillation token or the registers (timm's order)."""
        return int(self.has_class_token) + int(self.distillation_token) + self.register_tokens

    @property
    def norm_after_pool(self) -> bool:
        """timm's fc_norm: the pooled vector is normalised, not every token before pooling."""
        return self.pool in POOLED_MEANS and self.gap_norm == "after_pool"

    @property
    def feature_dim(self) -> int:
        """Width of the representation fed to the classifier (the few-shot features)."""
        if self.representation_size:
            return self.representation_size
        if self.head_hidden:
            return self.head_hidden[-1]
        if self.pool == "flatten":
            return self.dim * self.num_patches
        return self.dim

    def validate(self) -> None:
        """ConfigError naming the first field out of range, so that a bad config stops before the model is built."""
        check(self.patch_size > 0, f"patch_size must be positive, got {self.patch_size}")
        for side, size in zip(("height", "width"), self.image_size):
            check(size > 0, f"image {side} must be positive, got {size}")
            check(
                size % self.effective_patch_size == 0,
                f"image {side} {size} is not divisible by patch size {self.patch_size}"
                if self.backbone is None
                else f"image {side} {size} is not divisible by the hybrid's effective patch size "
                f"{self.effective_patch_size} (backbone stride {self.backbone.stride} x patch size {self.patch_size})",
            )
        for name in ("in_channels", "dim", "depth", "num_heads", "mlp_dim"):
            value = getattr(self, name)
            check(isinstance(value, int) and value > 0, f"{name} must be a positive int, got {value!r}")
        check(self.num_classes >= 0, f"num_classes must be >= 0, got {self.num_classes}")
        check(self.head_dim is None or self.head_dim > 0, f"head_dim must be positive or null, got {self.head_dim}")
        check(
            all(h > 0 for h in self.head_hidden), f"head_hidden widths must be positive, got {list(self.head_hidden)}"
        )
        check(
            self.class_names is None or len(self.class_names) == self.num_classes,
            f"class_names lists {len(self.class_names or [])} names for num_classes={self.num_classes}",
        )
        if self.head_dim is None:
            check(
                self.dim % self.num_heads == 0,
                f"width {self.dim} is not divisible by {self.num_heads} heads; set num_heads or head_dim",
            )
        self.validate_choices()

    def validate_choices(self) -> None:
        """The named choices, their combinations and the rates, apart from the sizes that validate checks first
        because the choices' rules (pos_embed's width) assume valid sizes."""
        # pool, pos_embed, pos_embed_at, pos_resample, act, gap_norm: each against its Literal type
        for name, annotation in _hints(type(self)).items():
            allowed, value = literal_values(annotation), getattr(self, name)
            check(allowed is None or value in allowed, f"unknown {name} {value!r}; choose one of {allowed}")
        check(
            self.pool != "token" or self.has_class_token,
            "pool 'token' reads the class token; class_token=False leaves none",
        )
        check(
            self.pos_embed_at == "input" or self.pos_embed in PER_LAYER_POSITION_EMBEDDINGS,
            f"pos_embed_at {self.pos_embed_at!r} needs a learned absolute E_pos {PER_LAYER_POSITION_EMBEDDINGS} "
            f"(Table 8), got pos_embed {self.pos_embed!r}",
        )
        if self.pos_embed in ("2d", "sincos"):
            check(
                self.dim % 4 == 0 if self.pos_embed == "sincos" else self.dim % 2 == 0,
                f"pos_embed {self.pos_embed!r} needs a width divisible by "
                f"{4 if self.pos_embed == 'sincos' else 2}, got {self.dim}",
            )
        for name in ("dropout", "attn_dropout", "drop_path", "head_dropout"):
            value = getattr(self, name)
            check(0.0 <= value < 1.0, f"{name} must be in [0, 1), got {value}")
        check(self.norm_eps > 0, f"norm_eps must be positive, got {self.norm_eps}")
        check(self.register_tokens >= 0, f"register_tokens must be 0 or more, got {self.register_tokens}")
        check(
            not self.distillation_token or (self.pool == "token" and not self.register_tokens),
            "distillation_token needs pool 'token' (DeiT's two heads read the first two tokens) and no registers",
        )
        check(
            self.init_values is None or self.init_values > 0,
            f"init_values (layer scale) must be positive or null, got {self.init_values}",
        )
        check(
            self.representation_size is None or self.representation_size > 0,
            f"representation_size must be positive or None, got {self.representation_size}",
        )
        check(
            not (self.representation_size and self.head_hidden),
            "representation_size and head_hidden are two kinds of head; set one",
        )

    # -- (de)serialisation ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["image_size"] = list(self.image_size)
        data["head_hidden"] = list(self.head_hidden)
        if self.backbone is not None:
            data["backbone"]["layers"] = list(self.backbone.layers)
        data["preprocessing"]["mean"] = list(self.preprocessing.mean)
        data["preprocessing"]["std"] = list(self.preprocessing.std)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ViTConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"expected a mapping of ViT config fields, got {type(data).__name__}")
        unknown = unknown_keys(cls, data)
        if unknown:
            raise ConfigError(f"unknown ViT config keys: {', '.join(unknown)}")
        return cls(**data)

    def replace(self, **changes: Any) -> ViTConfig:
        unknown = unknown_keys(self, changes)
        if unknown:
            raise ConfigError(f"unknown ViT config keys: {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)
