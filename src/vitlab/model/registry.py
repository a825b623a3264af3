"""The one model registry (timm's `register_model` idea) that `list_models`, `config_for`,
`create_untrained` and the tests iterate over.

Each family module registers itself when it is imported: its names and how a name becomes a config
(`register_family`: variants.py the ViT, hybrid.py the ResNet+ViT hybrids, bit.py the BiT ResNets),
and each model class the config type it is built from (`register_architecture`: vit.py, bit.py).
vitlab.model's __init__ imports the families in the order `list_models(family="all")` lists them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, TypeVar

from vitlab.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class Family:
    """A family of models: "vit" ("B/16"), "hybrid" ("R50+B/16"), "bit" ("BiT-R50x1")."""

    name: str
    # The names list_models enumerates; a family may build others on request ("Ti/4", "BiT-R26x2").
    names: tuple[str, ...]
    # config(name, **overrides) -> the config of that model, any field overridden; ConfigError if bad.
    config: Callable[..., Any]
    # Whether a name is this family's (e.g. "BiT-..."); None: every name no other family claims.
    claims: Callable[[str], bool] | None = None


FAMILIES: dict[str, Family] = {}
ARCHITECTURES: dict[type, type] = {}  # config type -> model class built from it


def register_family(family: Family) -> Family:
    if family.name in FAMILIES or family.name == "all":
        raise ValueError(f"model family {family.name!r} is registered twice")
    if family.claims is None and any(other.claims is None for other in FAMILIES.values()):
        raise ValueError(f"model family {family.name!r}: only one family takes the names no other claims")
    FAMILIES[family.name] = family
    return family


def make_config(config_type: Callable[..., T], name: str, fields: dict[str, Any]) -> T:
    """`config_type(**fields)` for the variant `name`; an unknown keyword is a ConfigError naming both."""
    try:
        return config_type(**fields)
    except TypeError as error:
        raise ConfigError(f"bad option for {name!r}: {error}") from None


def register_architecture(config_type: type, model_class: type) -> type:
    """`model_class(config)` builds the model of a `config_type` config."""
    ARCHITECTURES[config_type] = model_class
    return model_class


def family_argument(filter: object, family: str, stacklevel: int) -> tuple[Any, str]:
    """`list_models("hybrid")`, written when the first argument was the family, read as such with a
    DeprecationWarning (no model is named like a family); any other call unchanged."""
    if isinstance(filter, str) and filter in (*FAMILIES, "all") and family == "all":
        warnings.warn(
            f"list_models({filter!r}) reads {filter!r} as a family; write list_models(family={filter!r})",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
        return "", filter
    return filter, family


def list_models(filter: str | Sequence[str] = "", family: str = "all") -> list[str]:
    """Registered names, as timm's `list_models`: those matching any of the fnmatch globs `filter`
    ("S/*", ["B/*", "L/*"]; "" keeps all) in one family ("vit", "hybrid", "bit", ...) or "all"."""
    filter, family = family_argument(filter, family, stacklevel=3)
    if family == "all":
        names = [name for registered in FAMILIES.values() for name in registered.names]
    elif family in FAMILIES:
        names = list(FAMILIES[family].names)
    else:
        raise ConfigError(f"unknown model family {family!r}; choose one of {', '.join(FAMILIES)}, all")
    patterns = [filter] if isinstance(filter, str) else list(filter)
    if any(not isinstance(pattern, str) for pattern in patterns):
        raise ConfigError(f"list_models filter: globs are strings, not {filter!r}")
    patterns = [pattern for pattern in patterns if pattern]
    return [name for name in names if not patterns or any(fnmatchcase(name, p) for p in patterns)]


def family_of(name: str) -> Family:
    """The family a model name belongs to; a name no family claims goes to the default one, whose
    config names what is wrong with it."""
    claiming = [family for family in FAMILIES.values() if family.claims is not None and family.claims(name)]
    if len(claiming) > 1:
        raise ConfigError(
            f"model name {name!r} reads as one of {' and '.join(f.name for f in claiming)}; vitlab models lists the names"
        )
    if claiming:
        return claiming[0]
    default = next((family for family in FAMILIES.values() if family.claims is None), None)
    if default is None:
        raise ConfigError(f"no model family builds {name!r}; families: {', '.join(FAMILIES)}")
    return default


def architecture_for(config: Any) -> type:
    """The model class a config is built into."""
    for config_type in type(config).__mro__:
        if config_type in ARCHITECTURES:
            return ARCHITECTURES[config_type]
    known = ", ".join(t.__name__ for t in ARCHITECTURES)
    raise ConfigError(f"a model is built from a model name or a config ({known}), not {type(config).__name__}")


__all__ = [
    "Family",
    "architecture_for",
    "family_argument",
    "family_of",
    "list_models",
    "register_architecture",
    "register_family",
]
