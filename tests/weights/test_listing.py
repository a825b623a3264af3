"""`vitlab.list_models` as timm's (globs, family, pretrained=) and `vitlab models`, which prints each
name's parameter count and catalogue weights."""

from __future__ import annotations

import pytest

import vitlab
from vitlab.errors import ConfigError
from vitlab.memory.budget import built_parameters
from vitlab.model.factory import config_for
from vitlab.weights.catalogue import list_pretrained
from vitlab.weights.listing import model_rows


@pytest.mark.unit
def test_globs_select_names_in_registry_order():
    assert vitlab.list_models("S/*") == ["S/8", "S/14", "S/16", "S/32"]
    assert vitlab.list_models(["Ti/1*", "R+*"]) == ["Ti/14", "Ti/16", "R+Ti/16"]
    assert vitlab.list_models(filter="B/1?", family="vit") == ["B/14", "B/16"]
    assert vitlab.list_models("B/16", family="hybrid") == []
    assert vitlab.list_models() == vitlab.list_models(family="all")  # every family, as timm's lists every model


@pytest.mark.unit
def test_pretrained_keeps_the_names_with_catalogue_weights():
    with_weights = vitlab.list_models(pretrained=True)
    assert "B/16" in with_weights and "R50+B/16" in with_weights and "M/16" not in with_weights
    assert all(list_pretrained(name) for name in with_weights)
    assert {entry.model for entry in list_pretrained()} == set(with_weights)
    assert vitlab.list_models("S/*", pretrained=True) == ["S/16", "S/32"]


@pytest.mark.unit
def test_a_family_as_first_argument_still_works_with_a_warning():
    with pytest.warns(DeprecationWarning, match=r"list_models\(family='hybrid'\)") as caught:
        names = vitlab.list_models("hybrid")
    assert names == vitlab.list_models(family="hybrid") and "R50+B/16" in names
    assert caught[0].filename == __file__  # the warning points at the caller's line


@pytest.mark.unit
def test_bad_family_and_filter_are_one_line_errors():
    with pytest.raises(ConfigError, match="unknown model family 'cnn'"):
        vitlab.list_models(family="cnn")
    with pytest.raises(ConfigError, match="globs are strings"):
        vitlab.list_models([3])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_listed_parameter_counts_equal_the_built_models():
    rows = list(model_rows())
    assert [row.name for row in rows] == vitlab.list_models()
    for row in rows:
        assert row.parameters == built_parameters(config_for(row.name)), row.name


@pytest.mark.unit
def test_models_command_prints_parameters_and_weights(capsys):
    from vitlab.cli import main

    assert main(["models", "--filter", "S/*", "--pretrained"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "params", "weights", "config"]
    assert [line.split()[0] for line in lines[1:]] == ["S/16", "S/32"]
    tags = len(list_pretrained("S/16"))
    assert lines[1].split()[1:4] == ["22.1M", str(tags), "tags"]
    assert main(["models", "--filter", "M/*"]) == 0
    assert all(line.split()[2] == "-" for line in capsys.readouterr().out.splitlines()[1:])
