"""The config-field engine: typed dataclass configs checked, set by key, and read from YAML.

`coerce(value, annotation, where)` returns the value as the annotation describes it, or raises a
one-line ConfigError naming `where`, the expected type and what was given. `check_fields(instance)`
runs it over every field of a config dataclass, so that a config.json with `"qkv_bias": "yes"` or
`"num_classes": 10.5` is refused where it is read instead of failing (or passing) deep in the model.

A config made of sections (a dataclass whose fields are dataclasses, such as TrainConfig) is changed
by key: `set_value(config, "optim.lr", "1e-3", origin)` and `apply_mapping(config, yaml_document, origin)`
(the YAML itself, of files and of `--set`, is read by vitlab.textfiles). The config class may declare, as class
variables, `EXCLUSIVE` (setting one key clears another), `ZERO_MEANS_UNSET` (keys whose 0 clears
nothing), `SET_ELSEWHERE` (top-level keys and how they are set instead) and `RENAMED` (old keys a
file may still hold, and their new names).

An option is declared once, as its field (vitlab.config_options); `Range` is the interval a number
must lie in, here because the preprocessing rules below use it too.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union

from vitlab.errors import ConfigError
from vitlab.suggestions import did_you_mean

_REFUSED = object()  # what a _coerce_* helper answers for a value its annotation does not admit


def coerce(value: Any, annotation: Any, where: str, *, strict: bool = False) -> Any:
    """`value` as the type `annotation` describes, or ConfigError naming `where`.

    `strict` is for values read from files: no numbers written as strings, only finite floats.
    Without it a string from a command-line flag may stand for a number ("12", "1e-3").
    """
    coerced = _coerce_to(value, annotation, where, strict)
    if coerced is not _REFUSED:
        return coerced
    choices = literal_values(annotation)
    hint = did_you_mean(value, choices) if isinstance(value, str) and choices else ""
    raise ConfigError(f"{where}: expected {describe(annotation)}, got {show(value)}{hint}")


def _coerce_to(value: Any, annotation: Any, where: str, strict: bool) -> Any:
    """coerce's answer by the kind of annotation, _REFUSED where the value does not fit it."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        return _coerce_union(value, typing.get_args(annotation), where, strict)
    if origin is Literal:
        fits = value in typing.get_args(annotation) and not isinstance(value, bool)
        return value if fits else _REFUSED
    if origin in (tuple, list):
        return _coerce_sequence(value, origin, typing.get_args(annotation), where, strict)
    if annotation is Any:
        return value
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):
            return value
        return from_mapping(annotation, value, where) if isinstance(value, dict) else _REFUSED
    if annotation in (bool, int, float, str):
        return _coerce_scalar(value, annotation, strict)
    raise TypeError(f"unsupported config annotation {annotation!r}")


def _coerce_union(value: Any, options: tuple[Any, ...], where: str, strict: bool) -> Any:
    """The first option of a Union that admits `value`; a mapping for a dataclass option is that
    dataclass's or its own error."""
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
    return _REFUSED


def _coerce_sequence(value: Any, origin: type, args: tuple[Any, ...], where: str, strict: bool) -> Any:
    """A list or tuple of `value`'s items, each coerced: tuple[X, ...], tuple[X, Y] (that many) or list[X]."""
    if not isinstance(value, (list, tuple)):
        return _REFUSED
    if origin is list:
        (item_type,) = args or (Any,)
        return [coerce(item, item_type, where, strict=strict) for item in value]
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(coerce(item, args[0], where, strict=strict) for item in value)
    if len(value) == len(args):
        return tuple(coerce(item, arg, where, strict=strict) for item, arg in zip(value, args))
    return _REFUSED


def _coerce_scalar(value: Any, annotation: type, strict: bool) -> Any:
    """A bool, int, float or str; numbers written as strings only when not `strict`."""
    if annotation is bool or annotation is str:
        return value if isinstance(value, annotation) else _REFUSED
    if isinstance(value, numbers.Integral if annotation is int else numbers.Real) and not isinstance(value, bool):
        number = annotation(value)  # numpy's integers and floats too
    elif isinstance(value, str) and not strict:  # "12" from a flag; YAML 1.1 reads "1e-3" as a string
        try:
            number = annotation(value)  # int() also refuses "²" and "+-5"
        except ValueError:
            return _REFUSED
    else:
        return _REFUSED
    if annotation is float and strict and not math.isfinite(number):
        return _REFUSED
    return number


def from_mapping(cls: type, data: dict[str, Any], where: str) -> Any:
    """A config dataclass from a JSON/YAML mapping: unknown keys are named, the rest type-checked by
    the class itself (its __post_init__ calls check_fields)."""
    from_dict = getattr(cls, "from_dict", None)
    if from_dict is not None:  # the class names its unknown keys itself
        return from_dict(data)
    unknown = unknown_keys(cls, data)
    if unknown:
        known = sorted(f.name for f in dataclasses.fields(cls))
        hint = did_you_mean(unknown[0], known)
        raise ConfigError(f"{where}: unknown keys {', '.join(unknown)}{hint}; {cls.__name__} has {', '.join(known)}")
    return cls(**data)


def unknown_keys(cls: Any, keys: Any) -> list[str]:
    """The keys that name no field of the dataclass `cls`, sorted, for an error message."""
    known = {f.name for f in dataclasses.fields(cls)}
    return sorted(str(key) for key in set(keys) - known)


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
    return literal_values(annotation) is not None


def literal_values(annotation: Any) -> tuple[Any, ...] | None:
    """The allowed values of a Literal annotation (or of `Literal[...] | None`), else None."""
    if typing.get_origin(annotation) is Literal:
        return typing.get_args(annotation)
    if typing.get_origin(annotation) in (Union, types.UnionType):
        for option in typing.get_args(annotation):
            if typing.get_origin(option) is Literal:
                return typing.get_args(option)
    return None


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
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return f"a mapping of {annotation.__name__} fields"
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string"}.get(annotation, str(annotation))


def show(value: Any) -> str:
    text = (
        f"{type(value).__name__} {value!r}"
        if not isinstance(value, (int, float)) or isinstance(value, bool)
        else repr(value)
    )
    return text if len(text) <= 80 else text[:77] + "..."


# -- the range a number must lie in ---------------------------------------------------------------
@dataclass(frozen=True)
class Range:
    """The interval a number (each number of a tuple) must lie in; a bound of None is no bound. None
    as the value passes (an optional field's null); `or_null` says so in the rule."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False  # the low bound itself is outside
    high_open: bool = False
    unit: str = ""  # said after the bounds ("GiB", "degrees")
    or_null: bool = False

    def holds(self, value: Any) -> bool:
        if value is None:
            return True
        values = value if isinstance(value, (list, tuple)) else (value,)
        return all(self._holds(v) for v in values)

    def _holds(self, v: Any) -> bool:
        low_ok = self.low is None or (v > self.low if self.low_open else v >= self.low)
        return low_ok and (self.high is None or (v < self.high if self.high_open else v <= self.high))

    def rule(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        if self.low is not None and self.high is not None:
            interval = f"{'(' if self.low_open else '['}{_bound(self.low)}, {_bound(self.high)}{')' if self.high_open else ']'}"
            text = f"must be in {interval}{unit}"
        elif self.low is not None:
            text = f"must be {'>' if self.low_open else '>='} {_bound(self.low)}{unit}"
        else:
            text = f"must be {'<' if self.high_open else '<='} {_bound(self.high)}{unit}"
        return text + (" or null" if self.or_null else "")


def _bound(value: float | None) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"  # an integer bound exactly, however large


# A seed is any integer torch's generator takes (a signed 64-bit integer) and NumPy's (not negative).
SEED_RANGE = Range(0, 2**63 - 1)


def workers_range() -> Range:
    """How many data-loading worker processes a command accepts: 4 per CPU this process may run on,
    at least 8. More only compete for the CPUs; 10,000 forked workers never reached a first step."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return Range(0, max(8, 4 * cpus), unit=f"worker processes (4 per CPU of the {cpus} this process may use)")


# -- preprocessing values: one rule each for the layers that take them (a model's Preprocessing, a run's
# data section, data/transforms.py), here because data may not import the model ------------------------
Interpolation = Literal["bilinear", "bicubic", "nearest"]
INTERPOLATIONS: tuple[str, ...] = typing.get_args(Interpolation)
# timm's crop modes (pretrained_cfg["crop_mode"]): "center" keeps the aspect ratio, "squash" resizes
# each side to size / crop_pct; both then centre-crop to size.
CropMode = Literal["center", "squash"]
CROP_MODES: tuple[str, ...] = typing.get_args(CropMode)


def crop_mode_for(image_size: tuple[int, int], crop_mode: str | None) -> str:
    """The crop mode an evaluation transform applies: the one given, else vitlab's rule before the
    mode was recorded (a square input keeps the aspect ratio, any other is squashed)."""
    if crop_mode is not None:
        return crop_mode
    return "center" if image_size[0] == image_size[1] else "squash"


CROP_PCT_RANGE = Range(0, 1, low_open=True)  # evaluation resizes to size / crop_pct, then crops size
CROP_PCT_RULE = CROP_PCT_RANGE.rule()
STD_RULE = "must be positive"  # normalisation divides by it


def crop_pct_ok(crop_pct: float) -> bool:
    return CROP_PCT_RANGE.holds(crop_pct)


def std_ok(std: Any) -> bool:
    return all(s > 0 for s in std)


# -- configs of sections: setting values by key ------------------------------------------------------
def sections(cls: type) -> dict[str, type]:
    """The fields of a config that are themselves dataclasses, by name, with their classes."""
    hints = typing.get_type_hints(cls).items()
    return {name: hint for name, hint in hints if isinstance(hint, type) and dataclasses.is_dataclass(hint)}


def lookup(config: Any, key: str) -> Any:
    """The value of "section.field" (or of a whole section)."""
    section, _, name = key.partition(".")
    return getattr(getattr(config, section), name) if name else getattr(config, section)


def set_value(config: Any, key: str, value: Any, origin: str) -> None:
    """Set `section.field` to `value` after checking it against the field's type."""
    cls = type(config)
    known_sections = sections(cls)
    section_name, dot, name = key.partition(".")
    if section_name not in known_sections or not dot:
        elsewhere = getattr(cls, "SET_ELSEWHERE", {})
        if key in elsewhere:
            raise ConfigError(f"{origin}: {elsewhere[key]}")
        raise ConfigError(
            f"{origin}: unknown key {key!r}; keys are SECTION.FIELD with SECTION one of "
            f"{', '.join(known_sections)}{_suggest(known_sections, key)}"
        )
    section = getattr(config, section_name)
    hints = typing.get_type_hints(type(section))
    if name not in {f.name for f in dataclasses.fields(section)}:
        fields = [f.name for f in dataclasses.fields(section)]
        hint = did_you_mean(key, [f"{section_name}.{field}" for field in fields])
        raise ConfigError(f"{origin}: unknown key {key!r}{hint}; {section_name} has {', '.join(fields)}")
    setattr(section, name, coerce(value, hints[name], f"{origin}: {key}"))
    other, new = getattr(cls, "EXCLUSIVE", {}).get(key), getattr(section, name)
    if other is not None and new is not None and (new != 0 or key not in getattr(cls, "ZERO_MEANS_UNSET", ())):
        other_section, _, other_name = other.partition(".")
        default = getattr(type(getattr(config, other_section))(), other_name)
        setattr(getattr(config, other_section), other_name, None if default is None else type(default)(0))


def apply_mapping(config: Any, mapping: Any, origin: str) -> Any:
    """Apply a nested {section: {field: value}} mapping (a YAML file's content) to `config`; top-level
    keys that are not sections (TrainConfig's recipe) are the caller's."""
    known_sections = sections(type(config))
    if mapping is None:
        return config
    if not isinstance(mapping, dict):
        raise ConfigError(
            f"{origin}: expected a mapping of sections ({', '.join(known_sections)}), got {show(mapping)}"
        )
    plain_fields = {f.name for f in dataclasses.fields(config)} - set(known_sections)
    for section_name, values in mapping.items():
        if section_name in plain_fields:
            continue
        if section_name in known_sections and not isinstance(values, dict):
            raise ConfigError(f"{origin}: section {section_name!r} must be a mapping of fields, got {show(values)}")
        for name, value in values.items() if isinstance(values, dict) else [("", values)]:
            set_value(config, f"{section_name}.{name}" if name else str(section_name), value, origin)
    return config


def _suggest(known_sections: Mapping[str, type], key: str) -> str:
    """The keys a key without its section (`lr`), or with a mistyped one (`optm.lr`), may mean; none
    for a section named alone (`augment`), which is no mistyped field."""
    if key in known_sections:
        return ""
    keys = [f"{section}.{f.name}" for section, cls in known_sections.items() for f in dataclasses.fields(cls)]
    matches = [k for k in keys if k.partition(".")[2] == key]
    return f" (did you mean {' or '.join(matches)}?)" if matches else did_you_mean(key, keys)


def finite_checks(config: Any) -> list[tuple[str, bool, str]]:
    """Every number must be finite: YAML reads .inf and .nan as floats, which no range check rejects."""
    checks = []
    for section in sections(type(config)):
        for name, value in dataclasses.asdict(getattr(config, section)).items():
            numbers = value if isinstance(value, (list, tuple)) else [value]
            finite = all(math.isfinite(v) for v in numbers if isinstance(v, float))
            checks.append((f"{section}.{name}", finite, "must be a finite number"))
    return checks


def plain(value: Any) -> Any:
    """Tuples to lists, recursively, so that YAML and JSON hold plain values."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def as_sections(content: Any, origin: str) -> dict[str, Any]:
    """A YAML document that must be a mapping of sections; an empty file is none."""
    if content is not None and not isinstance(content, dict):
        raise ConfigError(f"{origin}: expected a mapping of sections, got {show(content)}")
    return content or {}
