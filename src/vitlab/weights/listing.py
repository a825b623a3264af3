"""`vitlab.list_models`: the registered model names, as timm's `list_models`, with `pretrained=True`
keeping those the pretrained catalogue has weights for (the registry itself knows nothing of weights)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from vitlab.memory.budget import parameter_count
from vitlab.model.factory import config_for
from vitlab.model.registry import family_argument
from vitlab.model.registry import list_models as registered_models

from .catalogue import list_pretrained


def models_with_weights() -> set[str]:
    """Model names with at least one catalogue entry ("B/16", "R50+B/16", ...)."""
    return {entry.model for entry in list_pretrained()}


def list_models(filter: str | Sequence[str] = "", family: str = "all", pretrained: bool = False) -> list[str]:
    """Registered names matching any fnmatch glob of `filter` ("S/*", ["B/*", "L/*"]; "" keeps all),
    of one family or "all"; with `pretrained=True`, only those with catalogue weights
    (`list_pretrained(name)` lists them)."""
    filter, family = family_argument(filter, family, stacklevel=3)
    names = registered_models(filter, family)
    if not pretrained:
        return names
    with_weights = models_with_weights()
    return [name for name in names if name in with_weights]


@dataclass(frozen=True)
class ModelRow:
    """One line of `vitlab models`."""

    name: str
    config: Any
    parameters: int  # counted on the meta device: listing H/14 allocates nothing
    weights: tuple[str, ...]  # the catalogue's tags for this name


def model_rows(filter: str | Sequence[str] = "", family: str = "all", pretrained: bool = False) -> Iterator[ModelRow]:
    """What `vitlab models` prints: each listed name with its config, parameter count and catalogue tags,
    one at a time, so that a table of every family starts at once."""
    for name in list_models(filter, family, pretrained):
        config = config_for(name)
        tags = tuple(entry.tag for entry in list_pretrained(name))
        yield ModelRow(name, config, parameter_count(config), tags)


__all__ = ["ModelRow", "list_models", "model_rows", "models_with_weights"]
