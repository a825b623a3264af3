"""What a checkpoint leaves unsaid: the patch grid of a flat E_pos table (the head count: head_counts.py)."""

from __future__ import annotations

import logging
import math
from typing import Any

from vitlab.errors import CheckpointError
from vitlab.model.config import PositionEmbeddingKind, as_pair

log = logging.getLogger("vitlab")

BIG_VISION_DEFAULT_SIZE = 224  # big_vision's ImageNet configs' resolution


def infer_image_size(
    num_patches: int, patch_size: int, hint: int | tuple[int, int] | None, source: str
) -> tuple[int, int]:
    """The native image size of an E_pos table holding `num_patches` patch positions.

    Flat tables do not record the grid: a square one is assumed unless `hint` (the image_size
    override) names a grid with exactly that many patches, which is how non-square models load.
    """
    if hint is not None:
        height, width = as_pair(hint)
        if (height // patch_size) * (width // patch_size) == num_patches:
            return (height, width)
    side = math.isqrt(num_patches)
    if side * side != num_patches:
        raise CheckpointError(
            f"{source}: {num_patches} position embeddings do not form a square grid; "
            f"pass image_size=(height, width) of the size the weights were trained at"
        )
    return (side * patch_size, side * patch_size)


def position_layout(
    table_length: int, prefix: int, patch_size: int, hint: Any, source: str
) -> tuple[tuple[int, int], bool]:
    """(native image size, whether E_pos has slots for the `prefix` tokens: class token, registers) for a
    (1, T, D) table.

    timm's `no_embed_class` models and big_vision's `pool_type="tok"` add E_pos to the patches only
    and the class token afterwards; it then has no position vector, which is the same as a zero one
    in vitlab's table. A table of h*w + 1 (a square and one) holds a slot for the class token.
    """
    if prefix and table_length > prefix:  # a table no longer than the prefix has no slots for it
        try:
            return infer_image_size(table_length - prefix, patch_size, hint, source), True
        except CheckpointError:
            pass
    size = infer_image_size(table_length, patch_size, hint, source)
    if prefix:
        log.info(
            "%s: %d position embeddings and %d prefix tokens: read as a %dx%d grid with no position vector "
            "for the class token or registers (big_vision's pool_type 'tok', timm's no_embed_class); pass image_size= if not",
            source,
            table_length,
            prefix,
            size[0] // patch_size,
            size[1] // patch_size,
        )
    return size, False


def fixed_position_embedding(
    source: str, image_size_hint: Any, pos_embed_hint: PositionEmbeddingKind | None
) -> tuple[PositionEmbeddingKind, tuple[int, int]]:
    """(pos_embed, image size) of a file without a learned E_pos: big_vision's posemb "sincos2d" (vitlab's
    "sincos", computed at any size) unless pos_embed= says "none"; the size is image_size= or 224."""
    pos_embed: PositionEmbeddingKind = pos_embed_hint or "sincos"
    if pos_embed_hint is None:
        log.info(
            "%s: no learned position embedding: big_vision's fixed sincos2d (posemb 'sincos2d'); pass "
            "pos_embed='none' for a model without one",
            source,
        )
    if image_size_hint is None:
        log.info(
            "%s: a fixed E_pos records no image size; %d assumed, pass image_size=",
            source,
            BIG_VISION_DEFAULT_SIZE,
        )
    return pos_embed, as_pair(image_size_hint or BIG_VISION_DEFAULT_SIZE)
