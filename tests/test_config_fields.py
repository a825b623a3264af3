"""The config-field engine (vitlab.config_fields): each Literal field of a config is checked against
its one list of allowed values, and the engine sets keys of any config made of sections."""

from __future__ import annotations

import dataclasses
import re
import typing

import pytest

from vitlab.config_fields import ConfigError, apply_mapping, literal_values, lookup, set_value
from vitlab.model.config import ViTConfig

pytestmark = pytest.mark.unit


def _vit_hints() -> dict:
    from vitlab.model.resnet import ResNetConfig

    return typing.get_type_hints(ViTConfig, localns={"ResNetConfig": ResNetConfig})


LITERAL_FIELDS = {name: values for name, hint in _vit_hints().items() if (values := literal_values(hint))}


def test_vit_config_has_the_literal_fields_it_checks():
    assert {"pool", "pos_embed", "pos_embed_at", "pos_resample", "act", "gap_norm"} <= set(LITERAL_FIELDS)


@pytest.mark.fault("bad-config")
@pytest.mark.parametrize("name", sorted(LITERAL_FIELDS))
def test_every_literal_field_refuses_other_values_listing_its_choices(name):
    with pytest.raises(ConfigError, match=re.escape(f"unknown {name} 'bogus'; choose one of {LITERAL_FIELDS[name]}")):
        ViTConfig(**{name: "bogus"})


@dataclasses.dataclass
class Inner:
    rate: float = 0.1
    steps: int | None = None


@dataclasses.dataclass
class Outer:
    name: str = "x"
    inner: Inner = dataclasses.field(default_factory=Inner)


def test_set_value_and_apply_mapping_work_on_any_config_of_sections():
    config = apply_mapping(Outer(), {"name": "ignored", "inner": {"rate": "1e-3"}}, "file.yaml")
    set_value(config, "inner.steps", 5, "--set")
    assert (lookup(config, "inner.rate"), lookup(config, "inner.steps"), config.name) == (0.001, 5, "x")
    with pytest.raises(
        ConfigError,
        match=r"--set: unknown key 'rate'; keys are SECTION\.FIELD with SECTION one of "
        r"inner \(did you mean inner\.rate\?\)",
    ):
        set_value(config, "rate", 1.0, "--set")
