"""From (config, state dict) to a ready model: every format's reader ends here.

Overrides that keep the weights' shapes (dropout, drop_path, numerics, ...) change the config
before the model is built. A new image size resamples E_pos and a new class count resets the
head after the weights are in (paper Sec. 3.2); each says so in one log line.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, overload

import torch

from vitlab.errors import CheckpointError
from vitlab.memory.budget import check_memory
from vitlab.model import BiTConfig, BiTResNet, ConfigError, VisionTransformer, ViTConfig, create_untrained
from vitlab.model.config import as_pair

from .preprocessing import log_preprocessing

log = logging.getLogger("vitlab")

MAX_LISTED = 20  # keys named per kind of mismatch; the rest are counted

# Fields the weights decide; an override may repeat them but not contradict them.
FIXED_BY_WEIGHTS = (
    "patch_size",
    "in_channels",
    "dim",
    "depth",
    "num_heads",
    "mlp_dim",
    "head_dim",
    "pool",
    "representation_size",
    "head_hidden",
    "pos_embed",
    "pos_embed_at",
    "qkv_bias",
    "gap_norm",
    "backbone",
)


def weights_part(name: str, value: Any) -> Any:
    """What the weights decide of a field: a hybrid backbone's units, width, stem and unit kind, not
    its numerics (padding, GroupNorm, weight standardisation), which a file may leave to an override."""
    if name == "backbone" and value is not None:
        return (value.layers, value.width, value.stem, value.preact)
    return value


def _listing(kind: str, items: list[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    more = f" (and {len(items) - MAX_LISTED} more)" if len(items) > MAX_LISTED else ""
    return f"{kind}: {shown}{more}"


def _size(size: tuple[int, int]) -> str:
    return f"{size[0]}x{size[1]}"


def check_state_dict(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], source: str) -> None:
    """Raise one CheckpointError naming every missing, unexpected and mis-shaped key, then one naming
    the tensors stored as integers where the model's are floating point: load_state_dict would cast
    them without a word, and a model of whole-number weights is no trained model."""
    expected = model.state_dict()
    check_shapes(
        {key: value.shape for key, value in expected.items()},
        {k: tuple(v.shape) for k, v in state_dict.items()},
        source,
    )
    integral = sorted(
        f"{key} ({str(value.dtype).removeprefix('torch.')})"
        for key, value in state_dict.items()
        if expected[key].is_floating_point() and not value.is_floating_point()
    )
    if integral:
        raise CheckpointError(
            f"{source}: weights must be floating point; " + _listing(f"{len(integral)} tensors are not", integral)
        )


def check_finite(state_dict: Mapping[str, torch.Tensor], source: str) -> None:
    """Weights with NaN or infinity give NaN logits for every input; name them instead."""
    bad = sorted(
        key
        for key, value in state_dict.items()
        if value.is_floating_point() and value.numel() and not bool(torch.isfinite(value).all())
    )
    if bad:
        raise CheckpointError(
            f"{source}: non-finite weights (NaN or infinity) in " + _listing(f"{len(bad)} tensors", bad)
        )


def expected_shapes(config: ViTConfig | BiTConfig) -> dict[str, torch.Size]:
    """The shape of every tensor the model's state dict holds, from a model built on the meta
    device: nothing is allocated, so a file's header can be checked before its tensors are read."""
    with torch.device("meta"):
        model = create_untrained(config)
    return {key: value.shape for key, value in model.state_dict().items()}


def check_matches_config(model: torch.nn.Module, source: str) -> None:
    """A model whose modules its config no longer rebuilds (pruned by prune_intermediate_layers, a
    part swapped by hand) is refused before anything is written: the folder would not load."""
    expected = expected_shapes(model.config)  # type: ignore[arg-type]
    found = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    try:
        check_shapes(expected, found, source)
    except CheckpointError as error:
        reason = str(error).split("; ", 1)[1]
        raise ConfigError(
            f"{source}: the model no longer matches its config, which a folder records; {reason}"
        ) from None


def check_shapes(expected: Mapping[str, torch.Size], found: Mapping[str, tuple[int, ...]], source: str) -> None:
    """Raise one CheckpointError naming every missing, unexpected and mis-shaped key."""
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    mismatched = sorted(
        f"{key} {tuple(found[key])} vs model {tuple(expected[key])}"
        for key in set(expected) & set(found)
        if tuple(found[key]) != tuple(expected[key])
    )
    problems = [
        _listing(kind, items)
        for kind, items in (
            ("missing keys", missing),
            ("unexpected keys", unexpected),
            ("shape mismatches", mismatched),
        )
        if items
    ]
    if problems:
        raise CheckpointError(f"{source}: checkpoint does not fit the model; " + "; ".join(problems))


@overload
def build_model(
    config: ViTConfig, state_dict: Mapping[str, torch.Tensor], source: str, overrides: dict[str, Any]
) -> VisionTransformer: ...


@overload
def build_model(
    config: BiTConfig, state_dict: Mapping[str, torch.Tensor], source: str, overrides: dict[str, Any]
) -> BiTResNet: ...


def build_model(
    config: ViTConfig | BiTConfig, state_dict: Mapping[str, torch.Tensor], source: str, overrides: dict[str, Any]
) -> VisionTransformer | BiTResNet:
    """Build the model the checkpoint describes, load it strictly, then apply size/class changes."""
    overrides = dict(overrides)
    memory_limit = overrides.pop("memory_limit", None)
    image_size = overrides.pop("image_size", None)
    num_classes = overrides.pop("num_classes", None)
    class_names = overrides.pop("class_names", None)
    if "preprocessing" in overrides:  # the converter said nothing of the file's own (it is not used)
        log_preprocessing(source, overrides["preprocessing"], "as given: preprocessing=, or a catalogue entry's")
    if overrides:
        requested = config.replace(**overrides)
        conflicts = [
            f"{name}={getattr(requested, name)!r} (checkpoint: {getattr(config, name)!r})"
            for name in FIXED_BY_WEIGHTS
            if weights_part(name, getattr(requested, name, None)) != weights_part(name, getattr(config, name, None))
        ]
        if conflicts:
            raise CheckpointError(f"{source}: overrides contradict the weights: {', '.join(conflicts)}")
        config = requested
    check_memory(config, limit=memory_limit, source=source)
    if image_size is not None:  # the activations are those of the size the model will run at
        check_memory(config.replace(image_size=as_pair(image_size)), limit=memory_limit, source=source)
    model = create_untrained(config)
    check_state_dict(model, state_dict, source)
    check_finite(state_dict, source)
    model.load_state_dict(state_dict)

    if image_size is not None and as_pair(image_size) != config.image_size:
        model.set_image_size(image_size)
        if isinstance(config, ViTConfig) and isinstance(model, VisionTransformer):  # a ResNet has no E_pos to resample
            how = {"sincos": "recomputed", "none": "none to resample"}.get(
                config.pos_embed, f"resampled, {config.pos_resample}"
            )
            log.info(
                "%s: image size %s -> %s, position embedding from a %dx%d to a %dx%d grid (%s)",
                source,
                _size(config.image_size),
                _size(model.config.image_size),
                *config.grid_size,
                *model.config.grid_size,
                how,
            )
    if num_classes is not None and num_classes != config.num_classes:
        model.reset_classifier(num_classes, class_names=class_names)
        log.info(
            "%s: %d classes -> %d, classifier reset to a zero-initialised head", source, config.num_classes, num_classes
        )
    elif class_names is not None:
        model.config = model.config.replace(class_names=list(class_names))
    names = model.config.class_names
    if names is not None and len(names) != model.config.num_classes:
        raise ConfigError(f"{len(names)} class names for {model.config.num_classes} classes")
    return model.eval()
