"""What a timm user reaches for on a ViT, on vitlab's: `pretrained_cfg` (so that
`timm.data.resolve_data_config(model=m)` returns the model's own preprocessing), `num_features`,
`get_classifier`, `reset_classifier(num_classes, global_pool)`, `forward_intermediates`,
`get_intermediate_layers`, `set_input_size` and `group_matcher` (for layer-wise LR decay), with
timm's signatures and behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from vitlab.config_fields import crop_mode_for
from vitlab.errors import ConfigError

from .aliases import timm_architecture, timm_first_conv

# timm's global_pool names for vitlab's pool options; vitlab's own names are accepted too.
TIMM_POOL = {"token": "token", "gap": "avg"}
POOL_FROM_TIMM = {"token": "token", "avg": "gap", "gap": "gap"}


def pretrained_cfg(config: Any, architecture: str | None, first_conv: str, fixed_input_size: bool) -> dict[str, Any]:
    """timm's pretrained_cfg of a model config (a ViT's or a BiT's): what timm.data.resolve_data_config
    reads, with the crop mode vitlab's evaluation applies."""
    pre = config.preprocessing
    cfg: dict[str, Any] = {
        "architecture": architecture,
        "input_size": (config.in_channels, *config.image_size),
        "fixed_input_size": fixed_input_size,
        "interpolation": pre.interpolation,
        "crop_pct": pre.crop_pct,
        "crop_mode": crop_mode_for(config.image_size, pre.crop_mode),
        "mean": tuple(pre.mean),
        "std": tuple(pre.std),
        "num_classes": config.num_classes,
        "first_conv": first_conv,
        "classifier": "head",
    }
    if config.class_names:
        cfg["label_names"] = list(config.class_names)
    return cfg


def take_indices(depth: int, indices: int | Sequence[int] | None) -> tuple[list[int], int]:
    """timm's feature_take_indices: None -> every block, n -> the last n, a list -> those
    (negative counts from the end); returns (indices, the largest)."""
    if indices is None:
        chosen = list(range(depth))
    elif isinstance(indices, int):
        if not 0 < indices <= depth:
            raise ValueError(f"indices={indices}: take between 1 and {depth} blocks")
        chosen = list(range(depth - indices, depth))
    else:
        chosen = [depth + i if i < 0 else i for i in indices]
        bad = [i for i, c in zip(indices, chosen) if not 0 <= c < depth]
        if bad:
            raise ValueError(f"indices {bad} out of range for {depth} blocks")
    return chosen, max(chosen)


class TimmInterface:
    """Mixed into VisionTransformer; reads `self.config` and the modules vit.py builds."""

    config: Any
    blocks: nn.ModuleList
    head: nn.Module
    norm: nn.Module
    relative_bias: nn.ModuleList | None

    if TYPE_CHECKING:  # defined by VisionTransformer

        def embed(self, images: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]: ...

        def set_image_size(self, image_size: int | tuple[int, int]) -> None: ...

    # -- attributes -------------------------------------------------------------------------
    @property
    def num_classes(self) -> int:
        return self.config.num_classes

    @property
    def embed_dim(self) -> int:
        return self.config.dim

    @property
    def num_features(self) -> int:
        """Width of the pooled encoder output (timm: embed_dim)."""
        return self.config.dim * self.config.num_patches if self.config.pool == "flatten" else self.config.dim

    @property
    def head_hidden_size(self) -> int:
        """Width the classifier reads: the representation layer's, when there is one."""
        return self.config.feature_dim

    @property
    def num_prefix_tokens(self) -> int:
        return self.config.num_prefix_tokens

    @property
    def has_class_token(self) -> bool:
        return self.config.class_token

    @property
    def global_pool(self) -> str:
        return TIMM_POOL.get(self.config.pool, self.config.pool)

    @property
    def pretrained_cfg(self) -> dict[str, Any]:
        """timm's per-weight record, from this model's config (always current)."""
        architecture = timm_architecture(self.config) or self.config.name
        return pretrained_cfg(self.config, architecture, timm_first_conv(self.config), fixed_input_size=True)

    @property
    def default_cfg(self) -> dict[str, Any]:  # timm's older name for pretrained_cfg
        return self.pretrained_cfg

    # -- the head ---------------------------------------------------------------------------
    def get_classifier(self) -> nn.Module:
        return self.head

    def check_global_pool(self, global_pool: str | None) -> None:
        """A global_pool this model can take, or a ConfigError naming it (before anything changes)."""
        if global_pool is None:
            return
        if not isinstance(global_pool, str) or global_pool not in POOL_FROM_TIMM:
            raise ConfigError(
                f"global_pool={global_pool!r}: vitlab pools with 'token' (class token) or 'avg' (GAP); "
                "class names go in class_names="
            )
        wanted = POOL_FROM_TIMM[global_pool]
        if wanted != self.config.pool:
            # The class token and E_pos's class slot exist or not by construction (vit_jax's GAP model has neither).
            raise ConfigError(
                f"global_pool={global_pool!r}: this model was built with pool={self.config.pool!r}; "
                f"build it with pool={wanted!r} instead"
            )

    # -- intermediate layers ----------------------------------------------------------------
    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | Sequence[int] | None = None,
        return_prefix_tokens: bool = False,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ) -> list[Any] | tuple[torch.Tensor, list[Any]]:
        """timm's forward_intermediates: block outputs (B, D, h, w) or (B, N, D), in block order."""
        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(f"output_fmt={output_fmt!r}; choose NCHW or NLC")
        chosen, last = take_indices(len(self.blocks), indices)
        z, grid = self.embed(x)
        prefix = self.config.num_prefix_tokens
        outputs: list[torch.Tensor] = []
        blocks = self.blocks[: last + 1] if stop_early else self.blocks
        for index, block in enumerate(blocks):
            bias = self.relative_bias[index](grid) if self.relative_bias is not None else None
            z, _ = block(z, bias, False, None)
            if index in chosen:
                outputs.append(self.norm(z) if norm else z)
        prefixes = [y[:, :prefix] for y in outputs]
        spatial = [y[:, prefix:] for y in outputs]
        if output_fmt == "NCHW":  # (B, N, D) -> (B, D, h, w), row-major over the patch grid
            spatial = [y.reshape(y.shape[0], *grid, -1).permute(0, 3, 1, 2).contiguous() for y in spatial]
        result: list[Any] = list(zip(spatial, prefixes)) if return_prefix_tokens and prefix else spatial
        if intermediates_only:
            return result
        return self.norm(z), result

    def get_intermediate_layers(
        self,
        x: torch.Tensor,
        n: int | Sequence[int] = 1,
        reshape: bool = False,
        return_prefix_tokens: bool = False,
        norm: bool = False,
    ) -> list[Any]:
        """The DINO-style interface timm keeps: forward_intermediates(..., intermediates_only=True)."""
        intermediates = self.forward_intermediates(
            x,
            n,
            return_prefix_tokens=return_prefix_tokens,
            norm=norm,
            output_fmt="NCHW" if reshape else "NLC",
            intermediates_only=True,
        )
        assert isinstance(intermediates, list)  # intermediates_only: no final output
        return intermediates

    # -- resolution -------------------------------------------------------------------------
    def set_input_size(
        self, img_size: int | tuple[int, int] | None = None, patch_size: int | tuple[int, int] | None = None
    ) -> None:
        """timm's set_input_size: a new resolution resamples E_pos (with this model's pos_resample)."""
        if patch_size is not None:
            pair = (patch_size, patch_size) if isinstance(patch_size, int) else tuple(patch_size)
            if pair != (self.config.patch_size, self.config.patch_size):
                raise ConfigError(
                    f"set_input_size: patch_size={patch_size!r}; vitlab keeps the patch size of the weights "
                    f"({self.config.patch_size}), the paper's rule when the resolution changes (Sec. 3.2)"
                )
        if img_size is not None:
            self.set_image_size(img_size)

    # -- optimiser groups -------------------------------------------------------------------
    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        """timm's groups for layer-wise decay: the embeddings first, then one group per block,
        the final norm last (the head, matched by nothing, goes after it)."""
        return dict(
            stem=r"^cls_token|pos_embed|patch_embed",
            blocks=[(r"^blocks\.(\d+)", None), (r"^relative_bias\.(\d+)", None), (r"^norm", (99999,))],
        )
