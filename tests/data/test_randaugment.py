"""RandAugment(N, M) is timm's `rand-m{M}-n{N}`: the same 15 operations, each at timm's strength for M = 10
and M = 15 (which timm treats as 10), and each operation's output equal to timm's own."""

from __future__ import annotations

import random

import numpy as np
import pytest
from PIL import Image
from timm.data import auto_augment as timm_aa

from vitlab.data import build_transforms
from vitlab.data.randaugment import OPERATIONS, RandAugment

pytestmark = pytest.mark.unit

HPARAMS = dict(timm_aa._HPARAMS_DEFAULT)


def timm_strength(name: str, magnitude: float):
    """timm's argument for `name` at `magnitude`, clamped as AugmentOp clamps it, without its random sign."""
    level_fn = timm_aa.LEVEL_TO_ARG[name]
    if level_fn is None:
        return None
    clamped = max(0.0, min(magnitude, timm_aa._LEVEL_DENOM))
    random.seed(0)
    (value,) = level_fn(clamped, HPARAMS)
    return abs(value)


def test_the_operations_are_timms():
    assert list(OPERATIONS) == timm_aa._RAND_TRANSFORMS


@pytest.mark.parametrize("magnitude", [10, 15])
@pytest.mark.parametrize("name", timm_aa._RAND_TRANSFORMS)
def test_each_operation_has_timms_strength(name, magnitude):
    ours = RandAugment(2, magnitude).strength(name)
    assert (
        ours == pytest.approx(timm_strength(name, magnitude)) if ours is not None else timm_strength(name, 10) is None
    )


def test_full_strength_values():
    """At M = 10 (and 15): rotate 30 degrees, shear 0.3, translate 45% of the side, enhance factor 1.9."""
    for magnitude in (10, 15):
        augment = RandAugment(2, magnitude)
        assert augment.strength("Rotate") == 30.0 and augment.strength("ShearX") == pytest.approx(0.3)
        assert augment.strength("TranslateXRel") == pytest.approx(0.45) and augment.strength("Color") == pytest.approx(
            1.9
        )
        assert (augment.strength("Posterize"), augment.strength("Solarize"), augment.strength("SolarizeAdd")) == (
            4,
            256,
            110,
        )
    assert RandAugment(2, 5).strength("Rotate") == 15.0


def test_the_recipe_transform_uses_it_at_full_strength():
    """small-data's RandAugment(2, 10): magnitude 10 is timm's full strength (torchvision's 31 bins gave a third)."""
    transform = build_transforms(32, mean=(0.5,) * 3, std=(0.5,) * 3, train=True, randaugment=(2, 10))
    augment = next(t for t in transform.transforms if isinstance(t, RandAugment))
    assert (augment.num_ops, augment.prob, augment.strength("Rotate")) == (2, 0.5, 30.0)


@pytest.mark.parametrize("name", timm_aa._RAND_TRANSFORMS)
def test_each_operation_draws_timms_image(name):
    """One operation, always applied, on a random image: pixel for pixel timm's operation at the same argument."""
    image = Image.fromarray(np.random.default_rng(3).integers(0, 256, (24, 20, 3), dtype=np.uint8))
    ours = RandAugment(1, 7, prob=1.0, operations=[name], interpolation=Image.Resampling.BILINEAR)
    random.seed(5)
    out = ours(image)
    random.seed(5)
    random.choices([name], k=1), random.random()  # the draws before the sign: same stream position
    argument = OPERATIONS[name].level(7)
    if OPERATIONS[name].signed and random.random() < 0.5:
        argument = -argument
    level_args = () if argument is None else (argument,)
    expected = timm_aa.NAME_TO_OP[name](image, *level_args, fillcolor=timm_aa._FILL, resample=Image.Resampling.BILINEAR)
    assert np.array_equal(np.asarray(out), np.asarray(expected))
    if name not in ("AutoContrast", "Equalize"):  # a random image is already spread and flat
        assert not np.array_equal(np.asarray(out), np.asarray(image))
