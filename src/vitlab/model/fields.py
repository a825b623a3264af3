"""Checking values against a dataclass field's type annotation: one function for every typed config.

`coerce(value, annotation, where)` returns the value as the annotation describes it, or raises a
one-line ConfigError naming `where`, the expected type and what was given. `check_fields(instance)`
runs it over every field of a config dataclass, so that a config.json with `"qkv_bias": "yes"` or
`"num_classes": 10.5` is refused where it is read instead of failing (or passing) deep in the model.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import types
import typing
from typing import Any, Literal, Union


class ConfigError(ValueError):
    """A configuration value that cannot describe a working model."""


def coerce(value: Any, annotation: Any, where: str, *, strict: bool = False) -> Any:
    """`value` as the type `annotation` describes, or ConfigError naming `where`.

    `strict` is for values read from files: no numbers written as strings, only finite floats.
    Without it a string from a command-line flag may stand for a number ("12", "1e-3").
    """
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            if dataclasses.is_dataclass(option) and isinstance(value, dict):
                return coerce(value, option, where, strict=strict)  # the mapping's own problem, named
            try:
                return coerce(value, option, where, strict=strict)
            except ConfigError:
                continue
    elif origin is Literal:
        if value in typing.get_args(annotation) and not isinstance(value, bool):
            return value
    elif origin is tuple:
        args = typing.get_args(annotation)
        if isinstance(value, (list, tuple)):
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(coerce(item, args[0], where, strict=strict) for item in value)
            if len(value) == len(args):
                return tuple(coerce(item, arg, where, strict=strict) for item, arg in zip(value, args))
    elif origin is list:
        (item_type,) = typing.get_args(annotation) or (Any,)
        if isinstance(value, (list, tuple)):
            return [coerce(item, item_type, where, strict=strict) for item in value]
    elif annotation is Any:
        return value
    elif dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):
            return value
        if isinstance(value, dict):
            return from_mapping(annotation, value, where)
    elif annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):  # numpy's integers too
            return int(value)
        if isinstance(value, str) and not strict:  # "12" from a flag; int() also refuses "²" and "+-5"
            try:
                return int(value)
            except ValueError:
                pass
    elif annotation is float:
        number: float | None = None
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str) and not strict:  # YAML 1.1 reads "1e-3" as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None and (math.isfinite(number) or not strict):
            return number
    elif annotation is str:
        if isinstance(value, str):
            return value
    else:
        raise TypeError(f"unsupported config annotation {annotation!r}")
    raise ConfigError(f"{where}: expected {describe(annotation)}, got {show(value)}")


def from_mapping(cls: type, data: dict[str, Any], where: str) -> Any:
    """A config dataclass from a JSON/YAML mapping: unknown keys are named, the rest type-checked by
    the class itself (its __post_init__ calls check_fields)."""
    from_dict = getattr(cls, "from_dict", None)
    if from_dict is not None:  # the class names its unknown keys itself
        return from_dict(data)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(str(key) for key in set(data) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {', '.join(unknown)}; {cls.__name__} has {', '.join(sorted(known))}")
    return cls(**data)


def check_fields(instance: Any, hints: dict[str, Any], *, skip: tuple[str, ...] = ()) -> None:
    """Coerce every field of a config dataclass in place (strictly), or raise ConfigError naming it.

    A Literal field holding some other string is left to the class's own validation, whose message
    lists the choices in the words of that field.
    """
    for f in dataclasses.fields(instance):
        if f.name in skip:
            continue
        value = getattr(instance, f.name)
        annotation = hints[f.name]
        if isinstance(value, str) and _is_literal(annotation):
            continue
        setattr(instance, f.name, coerce(value, annotation, f.name, strict=True))


def _is_literal(annotation: Any) -> bool:
    if typing.get_origin(annotation) is Literal:
        return True
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return any(typing.get_origin(a) is Literal for a in typing.get_args(annotation))
    return False


def describe(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return " or ".join("null" if a is type(None) else describe(a) for a in typing.get_args(annotation))
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {describe(args[0])}"
        return f"a list of {len(args)} ({', '.join(describe(a) for a in args)})"
    if origin is list:
        args = typing.get_args(annotation)
        plural = {str: "strings", int: "integers", float: "numbers", bool: "true/false values"}
        return f"a list of {plural.get(args[0], describe(args[0]))}" if args else "a list"
    if dataclasses.is_dataclass(annotation):
        return f"a mapping of {annotation.__name__} fields"
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string"}.get(
        annotation, str(annotation)
    )


def show(value: Any) -> str:
    text = f"{type(value).__name__} {value!r}" if not isinstance(value, (int, float)) or isinstance(value, bool) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
