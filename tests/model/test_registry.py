"""Every model the registry holds, family by family: the small variants built for real at a tiny
image size and saved and loaded (logits equal after loading), the large ones built on the meta
device and checked against their config. A family is covered by registering it."""

from __future__ import annotations

import json

import pytest
import torch

import vitlab
import vitlab.model
from helpers import randomise_
from vitlab.memory.budget import parameter_count
from vitlab.model import config_for, create_untrained, list_models
from vitlab.model.registry import ARCHITECTURES, FAMILIES, architecture_for, family_of
from vitlab.weights.folder import config_from_json, config_to_json

SMALL = 20_000_000  # parameters at the registered size: built for real and saved; above, on the meta device


TIER_SLOW = [pytest.mark.slow, pytest.mark.timeout(600)]
TIER_QUICK = {True: pytest.mark.integration, False: pytest.mark.unit}


def registered(small: bool) -> list:
    """The registered names under (or over) SMALL parameters. Of the small ones, the smallest of
    each family is an integration test, the others are slow (seconds each); the large ones are unit tests on
    the meta device."""
    params = []
    for family in FAMILIES.values():
        counts = {name: parameter_count(config_for(name)) for name in family.names}
        chosen = [name for name in family.names if (counts[name] < SMALL) == small]
        smallest = min(chosen, key=counts.__getitem__, default=None)
        params += [
            pytest.param(name, id=name, marks=TIER_SLOW if small and name != smallest else TIER_QUICK[small])
            for name in chosen
        ]
    return params


def tiny_image_size(config) -> int:
    """Two tokens a side for a ViT or hybrid (its effective patch size); for a ResNet, two pixels of
    its last feature map (its stride)."""
    stride = getattr(config, "effective_patch_size", None) or config.resnet.stride
    return 2 * stride


@pytest.mark.unit
def test_every_model_class_is_registered_and_built_from_registered_names():
    exported = [getattr(vitlab.model, name) for name in vitlab.model.__all__]
    model_classes = {obj for obj in exported if isinstance(obj, type) and issubclass(obj, torch.nn.Module)}
    assert model_classes and model_classes == set(ARCHITECTURES.values())
    assert {architecture_for(config_for(name)) for name in list_models(family="all")} == model_classes


@pytest.mark.unit
def test_every_family_is_listed_and_claims_its_own_names():
    assert list(FAMILIES)[:3] == ["vit", "hybrid", "bit"]  # the order `vitlab models` lists them in
    assert list_models(family="all") == [name for family in FAMILIES.values() for name in family.names]
    for family in FAMILIES.values():
        assert family.names and list_models(family=family.name) == list(family.names)
        small = [name for name in family.names if parameter_count(config_for(name)) < SMALL]
        assert small, f"family {family.name} has no variant under {SMALL:,} parameters to save and load"
        for name in family.names:
            config = config_for(name)
            assert family_of(name) is family and config.name == name


@pytest.mark.parametrize("name", registered(small=True))
def test_small_variants_save_and_load_with_the_same_logits(name, tmp_path):
    config = config_for(name)
    config = config_for(name, image_size=tiny_image_size(config), num_classes=3, class_names=["a", "b", "c"])
    model = randomise_(create_untrained(config)).eval()  # random values: a zero-initialised head hides everything
    images = torch.randn(2, config.in_channels, *config.image_size)
    with torch.no_grad():
        logits = model(images)
    assert logits.shape == (2, 3) and torch.isfinite(logits).all()
    assert (logits[0] - logits[1]).abs().max() > 1e-3 and logits.std() > 1e-3  # neither constant nor zero

    loaded = vitlab.load(vitlab.save_pretrained(model, tmp_path / "model"))
    assert type(loaded) is type(model) and not loaded.training
    assert loaded.config.to_dict() == model.config.to_dict()
    with torch.no_grad():
        torch.testing.assert_close(loaded(images), logits, rtol=0, atol=0)


@pytest.mark.parametrize("name", registered(small=False))
def test_large_variants_on_the_meta_device_match_their_config(name):
    config = config_for(name)
    document = json.loads(json.dumps(config_to_json(config)))  # the config.json a saved folder holds
    reread, _ = config_from_json(document, f"{name} config.json")
    assert reread == config
    with torch.device("meta"):
        model = create_untrained(config)
        again = create_untrained(reread)
    assert isinstance(model, architecture_for(config))
    count = sum(p.numel() for p in model.parameters())
    assert count == parameter_count(config) > SMALL  # the count the memory check refuses with
    shapes = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    assert shapes == {key: tuple(value.shape) for key, value in again.state_dict().items()}
    assert all(value.is_meta for value in model.state_dict().values())
