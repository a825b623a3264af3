"""The Vision Transformer, top to bottom as in the paper (Sec. 3.1, Eq. 1-4).

z_0  = [x_class; x_p^1 E; ...; x_p^N E] + E_pos          (Eq. 1)
z'_l = MSA(LN(z_{l-1})) + z_{l-1}                         (Eq. 2)
z_l  = MLP(LN(z'_l)) + z'_l                               (Eq. 3)
y    = LN(z_L^0)                                          (Eq. 4)
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from vitlab.errors import ConfigError

from .block import EncoderBlock, GatedMlp, Mlp
from .config import ViTConfig, as_pair
from .heads import AttentionPool, build_pre_logits, pool_tokens
from .hybrid import HybridEmbedding
from .patch_embed import PatchEmbedding
from .position import (
    LearnedPositionEmbedding,
    RelativeAttentionEmbedding,
    RelativePositionBias,
    SinCosPositionEmbedding,
    XYPositionEmbedding,
)
from .registry import register_architecture
from .timm_api import TimmInterface


@runtime_checkable
class ResizesGrid(Protocol):
    """A module holding a table per patch grid (position.py's embeddings and biases)."""

    def resize_grid(self, grid: tuple[int, int]) -> None: ...


def build_position_embedding(config: ViTConfig) -> nn.Module | None:
    args = (config.grid_size, config.dim, config.num_prefix_tokens)
    resample = (config.pos_resample, config.pos_resample_antialias)
    if config.pos_embed == "learned":
        return LearnedPositionEmbedding(*args, *resample)
    if config.pos_embed == "2d":
        return XYPositionEmbedding(*args, *resample)
    if config.pos_embed == "sincos":
        return SinCosPositionEmbedding(config.dim, config.num_prefix_tokens)
    return None  # "none", and the relative kinds, which live in the attention layers


def per_layer(config: ViTConfig, make) -> nn.ModuleList:
    return nn.ModuleList(make() for _ in range(config.depth))


class VisionTransformer(TimmInterface, nn.Module):
    """The ViT; TimmInterface adds timm's attributes and methods (pretrained_cfg, forward_intermediates, ...)."""

    # One encoder layer (Eq. 2-3); a family that changes only the layer (Axial-ViT) sets its own, which
    # takes the EncoderBlock's arguments.
    block_type: type[nn.Module] = EncoderBlock

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = config
        dim = config.dim
        self.patch_embed = (
            HybridEmbedding(config.backbone, config.patch_size, config.in_channels, dim)
            if config.backbone is not None
            else PatchEmbedding(config.patch_size, config.in_channels, dim, bias=not config.pre_norm)
        )
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim)) if config.has_class_token else None
        registers = config.register_tokens  # Darcet et al. 2023; timm's reg_token, small random as timm's
        self.reg_token = nn.Parameter(torch.randn(1, registers, dim) * 1e-6) if registers else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, dim)) if config.distillation_token else None
        # Table 8's columns: one E_pos for the input, or before every layer (shared), or one per layer.
        self.layer_pos_embed: nn.ModuleList | None
        if config.pos_embed_at == "every_layer":
            self.pos_embed = None
            self.layer_pos_embed = per_layer(config, lambda: build_position_embedding(config))
        else:
            self.pos_embed = build_position_embedding(config)
            self.layer_pos_embed = None
        # "right after adding E_pos" (Appendix B.1), at the input
        self.pos_drop = nn.Dropout(config.dropout if config.embed_dropout else 0.0)
        # CLIP's ViT normalises z_0 before the first block (timm's norm_pre)
        self.norm_pre = nn.LayerNorm(dim, eps=config.norm_eps) if config.pre_norm else nn.Identity()
        grid, heads, prefix = config.grid_size, config.num_heads, config.num_prefix_tokens
        resample = (config.pos_resample, config.pos_resample_antialias)
        self.relative_bias = (
            per_layer(config, lambda: RelativePositionBias(grid, heads, prefix, *resample))
            if config.pos_embed == "relative_bias"
            else None
        )
        self.relative_attention = (
            per_layer(config, lambda: RelativeAttentionEmbedding(grid, config.attn_head_dim, prefix))
            if config.pos_embed == "relative"
            else None
        )
        # Stochastic depth grows linearly with depth (the DeiT rule).
        drop_rates = [config.drop_path * i / max(config.depth - 1, 1) for i in range(config.depth)]
        self.blocks = nn.ModuleList(self.build_block(config, rate) for rate in drop_rates)
        # vit_jax normalises all tokens before pooling; timm's GAP models normalise the pooled vector.
        after = config.norm_after_pool
        self.norm = nn.Identity() if after else nn.LayerNorm(dim, eps=config.norm_eps)
        self.fc_norm = nn.LayerNorm(dim, eps=config.norm_eps) if after else nn.Identity()
        self.attn_pool = (
            AttentionPool(dim, config.num_heads, Mlp(dim, config.mlp_dim, config.act), config.norm_eps)
            if config.pool == "map"
            else None
        )
        pooled_dim = dim * config.num_patches if config.pool == "flatten" else dim
        self.pre_logits = build_pre_logits(
            pooled_dim, config.representation_size, config.head_hidden, config.head_dropout
        )
        self.head_drop = nn.Dropout(0.0 if config.head_hidden else config.head_dropout)
        self.head = nn.Linear(config.feature_dim, config.num_classes) if config.num_classes else nn.Identity()
        self.head_dist = self.distillation_head()
        self.grad_checkpointing = False
        self.sync_patch_embed()
        self.init_weights()

    def build_block(self, config: ViTConfig, drop_path: float) -> nn.Module:
        """One encoder layer of the class's block_type."""
        return self.block_type(
            config.dim,
            config.num_heads,
            mlp_dim=config.mlp_dim,
            head_dim=config.head_dim,
            qkv_bias=config.qkv_bias,
            dropout=config.dropout,
            attn_dropout=config.attn_dropout,
            proj_dropout=config.proj_dropout,
            drop_path=drop_path,
            act=config.act,
            mlp_out_act=config.mlp_out_act,
            mlp_layer=GatedMlp if config.gated_mlp else Mlp,
            norm_eps=config.norm_eps,
            init_values=config.init_values,
            qk_norm=config.qk_norm,
        )

    # -- initialisation (as the reference vit_jax code) -----------------------------------------
    def init_weights(self) -> None:
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.normal_(module.bias, std=1e-6)
            if name.endswith("attn.qkv"):
                for part in module.weight.data.chunk(3, dim=0):  # q, k, v are separate Dense layers
                    nn.init.xavier_uniform_(part)
        conv = self.patch_embed.proj
        fan_in = conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1]
        nn.init.trunc_normal_(conv.weight, std=math.sqrt(1.0 / fan_in) / 0.87962566103423978)  # lecun_normal
        if conv.bias is not None:  # none with pre_norm
            nn.init.zeros_(conv.bias)
        for head in (self.head, self.head_dist):
            if isinstance(head, nn.Linear):
                nn.init.zeros_(head.weight)
                nn.init.zeros_(head.bias)

    def distillation_head(self) -> nn.Module | None:
        """DeiT's head on the distillation token, as the classifier (timm's head_dist); None without one."""
        if not self.config.distillation_token:
            return None
        return nn.Linear(self.config.feature_dim, self.config.num_classes) if self.config.num_classes else nn.Identity()

    # -- Eq. 1 ---------------------------------------------------------------------------------
    def embed(self, images: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """(B, C, H, W) -> z_0 (B, prefix + N, D) and the patch grid."""
        tokens, grid = self.patch_embed(images)
        prefix = [token for token in (self.cls_token, self.dist_token, self.reg_token) if token is not None]
        if prefix:  # [x_class; x_distil or registers; patches], timm's order
            tokens = torch.cat([token.expand(tokens.shape[0], -1, -1) for token in prefix] + [tokens], dim=1)
        return self.norm_pre(self.pos_drop(self.add_pos_embed(tokens, grid, 0))), grid

    def add_pos_embed(self, tokens: torch.Tensor, grid: tuple[int, int], layer: int) -> torch.Tensor:
        """Add the E_pos that goes before `layer` (layer 0: the input of Eq. 1), if any."""
        if self.layer_pos_embed is not None:
            table = self.layer_pos_embed[layer](grid)
        elif self.pos_embed is not None and (layer == 0 or self.config.pos_embed_at == "every_layer_shared"):
            table = self.pos_embed(grid)
        else:
            return tokens
        # .to(tokens): the fixed sin-cos table is computed on the CPU whatever the model's device
        return tokens + table.to(tokens)

    # -- Eq. 2-4 -------------------------------------------------------------------------------
    def encode(
        self, images: torch.Tensor, need_weights: bool = False, prefix_only: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Encoder output (B, T, D) after the final norm, and each layer's attention if asked.

        prefix_only: the last layer computes only the class token's row, (B, 1, D), which is all
        that y = LN(z_L^0) (Eq. 4) reads; it skips ~1/depth of the work and changes no number.
        """
        z, grid = self.embed(images)
        attentions: list[torch.Tensor] = []
        last = len(self.blocks) - 1
        for index, block in enumerate(self.blocks):
            if index > 0:
                z = self.add_pos_embed(z, grid, index)  # Table 8's "every layer" columns
            bias = self.relative_bias[index](grid) if self.relative_bias is not None else None
            relative = self.relative_attention[index](grid) if self.relative_attention is not None else None
            queries = self.config.num_prefix_tokens if prefix_only and index == last else None
            if self.grad_checkpointing and self.training and not need_weights:
                z, _ = checkpoint(block, z, bias, False, queries, relative, use_reentrant=False)
            else:
                z, weights = block(z, bias, need_weights, queries, relative)
                if weights is not None:
                    attentions.append(weights)
        return self.norm(z), attentions

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        return self.encode(images)[0]

    def forward_head(self, tokens: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Pool the encoder tokens; return the representation (pre_logits=True) or the logits."""
        prefix = self.config.num_prefix_tokens
        if self.attn_pool is not None:
            pooled = self.attn_pool(tokens[:, prefix:])
        else:
            pooled = self.fc_norm(pool_tokens(tokens, self.config.pool, prefix))
        features = self.head_drop(self.pre_logits(pooled))
        if self.head_dist is None:
            return features if pre_logits else self.head(features)
        distilled = self.head_drop(self.pre_logits(tokens[:, 1]))  # DeiT: the mean of the two heads
        return (features + distilled) / 2 if pre_logits else (self.head(features) + self.head_dist(distilled)) / 2

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        tokens, _ = self.encode(images, prefix_only=self.config.pool == "token")
        return self.forward_head(tokens)

    def forward_with_attention(self, images: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Logits and, from the same pass, every layer's attention weights (B, heads, T, T)."""
        tokens, attentions = self.encode(images, need_weights=True)
        return self.forward_head(tokens), attentions

    # -- fine-tuning (Sec. 3.2) ----------------------------------------------------------------
    def reset_classifier(
        self, num_classes: int, global_pool: str | None = None, *, class_names: list[str] | None = None
    ) -> None:
        """Drop the pre-training head's hidden layer and attach a zero-initialised D x K layer.

        timm's signature: `global_pool` is one of timm's pools ('token', 'avg', 'max', 'avgmax', or ''
        for every token), over the tokens the model was built with; the new classes' names are a keyword.
        """
        pooling = self.pool_change(global_pool)
        if class_names is not None:
            class_names = [str(name) for name in class_names]
            if len(class_names) != num_classes:
                raise ConfigError(f"{len(class_names)} class names for {num_classes} classes")
        if self.config.representation_size:
            self.pre_logits = nn.Identity()
        self.config = self.config.replace(
            num_classes=num_classes, representation_size=None, class_names=class_names, **pooling
        )
        if self.config.pool != "map":  # timm drops the MAP head for another pool
            self.attn_pool = None
        reference = self.patch_embed.proj.weight
        if num_classes:
            self.head = nn.Linear(self.config.feature_dim, num_classes).to(reference.device, reference.dtype)
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)
        else:
            self.head = nn.Identity()
        self.head_dist = self.distillation_head()
        if self.head_dist is not None:
            self.head_dist.to(reference.device, reference.dtype)
            for param in self.head_dist.parameters():
                nn.init.zeros_(param)

    def set_image_size(self, image_size: int | tuple[int, int]) -> None:
        """Change the native resolution; learned position embeddings are resampled in 2-D."""
        size = as_pair(image_size)
        new_config = self.config.replace(image_size=size)
        new_grid, old_grid = new_config.grid_size, self.config.grid_size
        if new_config.pool == "flatten" and new_grid != old_grid:
            raise ValueError("a flatten-pooled head depends on the number of patches; its image size is fixed")
        for module in self.modules():
            if module is not self and isinstance(module, ResizesGrid):
                module.resize_grid(new_grid)
        self.config = new_config
        self.sync_patch_embed()

    def no_weight_decay(self) -> set[str]:
        """Parameter names that take no weight decay: tokens, position tables, norms and biases."""
        return {
            name
            for name, param in self.named_parameters()
            if param.dim() <= 1
            or name.startswith(
                ("cls_token", "reg_token", "pos_embed", "layer_pos_embed", "relative_bias", "relative_attention")
            )
        }

    def set_grad_checkpointing(self, enabled: bool = True) -> None:
        self.grad_checkpointing = enabled

    # model.save_pretrained(DIR, format=...) is attached by vitlab.weights.folder: the model knows
    # nothing of files.


register_architecture(ViTConfig, VisionTransformer)
