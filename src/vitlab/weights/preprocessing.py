"""Where a checkpoint's preprocessing comes from: the library that published the weights, or an
assumption said in one log line.

A timm file takes timm's pretrained config of its tag (`pretrained_tag=`, or the architecture and
tag a timm folder or train.py checkpoint records); a torchvision file its weights' transforms
(`pretrained_tag="IMAGENET1K_V1"`); an HF folder its preprocessor_config.json; an npz vit_jax's
evaluation pipeline. Every load logs the preprocessing it uses and where it came from.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from vitlab.config_fields import CROP_MODES, INTERPOLATIONS
from vitlab.errors import CheckpointError
from vitlab.model import Preprocessing

log = logging.getLogger("vitlab")

# timm's defaults for a pretrained_cfg key it lacks (timm/models/_pretrained.py, PretrainedCfg).
TIMM_CFG_DEFAULTS: dict[str, Any] = dict(
    mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), crop_pct=0.875, interpolation="bicubic", crop_mode="center"
)
# vit_jax's evaluation resizes the whole image to the model's size (input_pipeline.py:
# tf.image.resize(im, [crop_size, crop_size]), bilinear) and maps pixels to [-1, 1].
VIT_JAX_PREPROCESSING = Preprocessing(
    mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=1.0, interpolation="bilinear", crop_mode="squash"
)


def describe(pre: Preprocessing) -> str:
    crop = pre.crop_mode or "center if square, else squash"
    numbers = ", ".join(f"{value:g}" for value in pre.mean), ", ".join(f"{value:g}" for value in pre.std)
    return f"mean ({numbers[0]}), std ({numbers[1]}), crop_pct {pre.crop_pct:g}, crop_mode {crop}, {pre.interpolation}"


def log_preprocessing(source: str, pre: Preprocessing, origin: str) -> None:
    """The one line that says which preprocessing a load uses and where it came from."""
    log.info("%s: preprocessing %s (%s)", source, describe(pre), origin)


def crop_pct_for(crop: Sequence[int], resize: Sequence[int]) -> float | None:
    """The crop_pct for which vitlab's floor(side / crop_pct) turns each side of `crop` into the
    same side of `resize`: the largest, crop / resize nudged down past rounding; None if none does."""
    crop_pct = min(c / r for c, r in zip(crop, resize))
    while any(math.floor(c / crop_pct) < r for c, r in zip(crop, resize)):
        crop_pct = math.nextafter(crop_pct, 0.0)
    if any(math.floor(c / crop_pct) != r for c, r in zip(crop, resize)) or crop_pct > 1.0:
        return None
    return crop_pct


def from_timm_cfg(cfg: Mapping[str, Any], source: str) -> Preprocessing:
    """A timm pretrained_cfg (a dict) as vitlab's Preprocessing; timm's defaults for what it lacks."""
    values: dict[str, Any] = {
        key: cfg[key] if cfg.get(key) is not None else default for key, default in TIMM_CFG_DEFAULTS.items()
    }
    if values["interpolation"] not in INTERPOLATIONS:
        raise CheckpointError(
            f"{source}: timm interpolation {values['interpolation']!r}; vitlab resizes with {', '.join(INTERPOLATIONS)}"
        )
    if values["crop_mode"] not in CROP_MODES:
        raise CheckpointError(
            f"{source}: timm crop_mode {values['crop_mode']!r}; vitlab crops with {', '.join(CROP_MODES)}"
        )
    return Preprocessing(
        mean=tuple(float(v) for v in values["mean"]),  # type: ignore[arg-type]  # Preprocessing checks the length
        std=tuple(float(v) for v in values["std"]),  # type: ignore[arg-type]
        crop_pct=float(values["crop_pct"]),
        interpolation=values["interpolation"],
        crop_mode=values["crop_mode"],
    )


def timm_pretrained_cfg(name: str, source: str) -> dict[str, Any]:
    """timm's pretrained_cfg of "architecture.tag"; timm must be installed to read it."""
    try:
        from timm.models import get_pretrained_cfg
    except ModuleNotFoundError:
        raise CheckpointError(f"{source}: pretrained_tag={name!r} is read from timm's registry; install timm") from None
    try:
        cfg = get_pretrained_cfg(name) if "." in name else None
    except RuntimeError:  # an architecture timm has, with another tag
        cfg = None
    if cfg is None:
        raise CheckpointError(f"{source}: timm has no pretrained weights named {name!r} (architecture.tag)")
    return cfg.to_dict()


def timm_tag_name(tag: str, architectures: Sequence[str], source: str) -> str:
    """The timm weights name "architecture.tag" of a tag, among the architectures the file may be.

    A full name must be of one of them; a bare tag ("augreg_in21k") must name weights of exactly one."""
    if "." in tag:
        architecture = tag.split(".")[0]
        if architectures and architecture not in architectures:
            raise CheckpointError(
                f"{source}: pretrained_tag={tag!r} is a {architecture}, and the weights' shapes are those of "
                f"{', '.join(architectures[:6])}"
            )
        return tag
    try:
        import timm
    except ModuleNotFoundError:
        raise CheckpointError(f"{source}: pretrained_tag={tag!r} is read from timm's registry; install timm") from None
    found = [f"{arch}.{tag}" for arch in architectures if f"{arch}.{tag}" in set(timm.list_pretrained(f"{arch}.*"))]
    if len(found) != 1:
        which = (
            f"{len(found)} architectures ({', '.join(found)})" if found else "none of " + ", ".join(architectures[:6])
        )
        raise CheckpointError(
            f"{source}: pretrained_tag={tag!r} names weights of {which}; pass the full name, architecture.tag"
        )
    return found[0]


def torchvision_weights_preprocessing(tag: str, models: Sequence[str], source: str) -> tuple[Preprocessing, int]:
    """The preprocessing and crop size of a torchvision weights enum ("IMAGENET1K_V1" or
    "ViT_B_16_Weights.IMAGENET1K_V1") of one of `models` (those the weights' shapes may be; all of
    torchvision's ViTs if empty): its transforms() resize the shorter side, then centre-crop."""
    from torchvision.models import get_model_weights, list_models

    enum_name, _, member = tag.rpartition(".")
    names = models or [name for name in list_models() if name.startswith("vit_")]
    candidates = [get_model_weights(name) for name in names]
    found = [
        weights[member]
        for weights in candidates
        if member in weights.__members__ and (not enum_name or weights.__name__ == enum_name)
    ]
    if len(found) != 1:
        raise CheckpointError(
            f"{source}: pretrained_tag={tag!r} names {len(found)} torchvision ViT weights; pass ENUM.MEMBER, "
            "e.g. ViT_B_16_Weights.IMAGENET1K_V1"
        )
    transforms = found[0].transforms()
    (crop,), (resize,) = transforms.crop_size, transforms.resize_size
    interpolation = transforms.interpolation.value
    crop_pct = crop_pct_for([crop], [resize])
    assert crop_pct is not None  # a single side always has one
    pre = Preprocessing(
        mean=tuple(transforms.mean),
        std=tuple(transforms.std),
        crop_pct=crop_pct,
        interpolation=interpolation,
        crop_mode="center",
    )
    return pre, crop
