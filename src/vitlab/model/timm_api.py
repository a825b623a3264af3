"""What a timm user reaches for on a ViT, on vitlab's: `pretrained_cfg` (so that
`timm.data.resolve_data_config(model=m)` returns the model's own preprocessing), `num_features`,
`feature_info`, `get_classifier`, `reset_classifier(num_classes, global_pool)` with timm's pools,
`forward_intermediates` (its `output_dict` too), `prune_intermediate_layers`,
`get_intermediate_layers`, `set_input_size`, `group_matcher` (for layer-wise LR decay) and
`patch_embed.img_size / grid_size / num_patches`, with timm's signatures and behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from vitlab.config_fields import crop_mode_for
from vitlab.errors import ConfigError

from .aliases import POOL_FROM_TIMM, TIMM_POOL, timm_architecture, timm_first_conv


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
    fc_norm: nn.Module
    pre_logits: nn.Module
    patch_embed: Any  # PatchEmbedding or HybridEmbedding
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
        return self.config.has_class_token

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

    def pool_change(self, global_pool: str | None) -> dict[str, Any]:
        """The config fields a timm global_pool sets ('', 'avg', 'avgmax', 'max', 'token'), or a
        ConfigError naming it, before anything changes. The class token stays as built, and so does
        where the final norm sits (timm keeps both)."""
        if global_pool is None:
            return {}
        if not isinstance(global_pool, str) or global_pool not in POOL_FROM_TIMM:
            raise ConfigError(
                f"global_pool={global_pool!r}: vitlab pools with timm's 'token', 'avg', 'max', 'avgmax' or '' "
                "(every token); class names go in class_names="
            )
        pool = POOL_FROM_TIMM[global_pool]
        if pool == "token" and not self.config.has_class_token:
            raise ConfigError(f"global_pool={global_pool!r}: this model was built without a class token")
        if pool == "map" and self.config.pool != "map":  # timm's reset_classifier refuses it too
            raise ConfigError(f"global_pool={global_pool!r}: this model was built without a MAP head to pool with")
        after = self.config.norm_after_pool
        if after and pool in ("token", "none"):
            raise ConfigError(
                f"global_pool={global_pool!r}: this model normalises the pooled vector (timm's fc_norm), not the "
                "tokens; it pools with 'avg', 'max' or 'avgmax'"
            )
        return dict(
            pool=pool, class_token=self.config.has_class_token, gap_norm="after_pool" if after else "before_pool"
        )

    @property
    def feature_info(self) -> list[dict[str, Any]]:
        """timm's record of what forward_intermediates returns: one entry per block."""
        width, reduction = self.config.dim, self.config.effective_patch_size
        return [dict(module=f"blocks.{i}", num_chs=width, reduction=reduction) for i in range(len(self.blocks))]

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
        output_dict: bool = False,
    ) -> list[Any] | tuple[torch.Tensor, list[Any]] | dict[str, Any]:
        """timm's forward_intermediates: block outputs (B, D, h, w) or (B, N, D), in block order; with
        output_dict, timm's {"image_intermediates", "image_intermediates_prefix", "image_features"}."""
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
        if output_dict:
            named: dict[str, Any] = {"image_intermediates": spatial}
            if return_prefix_tokens and prefix:
                named["image_intermediates_prefix"] = prefixes
            if not intermediates_only:
                named["image_features"] = self.norm(z)
            return named
        result: list[Any] = list(zip(spatial, prefixes)) if return_prefix_tokens and prefix else spatial
        if intermediates_only:
            return result
        return self.norm(z), result

    def prune_intermediate_layers(
        self, indices: int | Sequence[int] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """timm's: drop the blocks after the last of `indices` (and the final norm, the head) for a
        feature backbone; returns the indices kept. The config's depth follows; a model pruned of its
        norm or head no longer matches its config, and save_pretrained refuses it."""
        chosen, last = take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[: last + 1]
        for name in ("relative_bias", "relative_attention", "layer_pos_embed"):  # one module per block
            per_block = getattr(self, name, None)
            if per_block is not None:
                setattr(self, name, per_block[: last + 1])
        self.config = self.config.replace(depth=last + 1)
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.fc_norm, self.pre_logits, self.head = nn.Identity(), nn.Identity(), nn.Identity()
            self.config = self.config.replace(
                num_classes=0,
                pool="none",
                class_token=self.config.has_class_token,
                representation_size=None,
                class_names=None,
            )
        return chosen

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

    def sync_patch_embed(self) -> None:
        """timm's patch_embed.img_size, grid_size and num_patches, for the config's image size."""
        embed = self.patch_embed
        embed.img_size = self.config.image_size
        embed.grid_size = self.config.grid_size
        embed.num_patches = self.config.num_patches

    # -- optimiser groups -------------------------------------------------------------------
    def group_matcher(self, coarse: bool = False) -> dict[str, Any]:
        """timm's groups for layer-wise decay: the embeddings first, then one group per block,
        the final norm last (the head, matched by nothing, goes after it)."""
        return dict(
            stem=r"^cls_token|pos_embed|patch_embed",
            blocks=[(r"^blocks\.(\d+)", None), (r"^relative_bias\.(\d+)", None), (r"^norm", (99999,))],
        )
