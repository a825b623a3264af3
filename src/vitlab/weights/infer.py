"""What a checkpoint leaves unsaid: the patch grid of a flat E_pos table (the head count: heads.py)."""

from __future__ import annotations

import math

from vitlab.model.config import as_pair

from .errors import CheckpointError


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
