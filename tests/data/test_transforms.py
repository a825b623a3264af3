"""build_transforms: the inception crop + flip for training, resize + centre crop for evaluation."""

from __future__ import annotations

import pickle
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

from vitlab.data import build_transforms
from vitlab.data.randaugment import RandAugment
from vitlab.data.transforms import train_transform

pytestmark = pytest.mark.unit

HALF = dict(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))  # vit_jax: pixels to [-1, 1]


def halves(width=64, height=32) -> Image.Image:
    """Left half black, right half white."""
    pixels = np.zeros((height, width, 3), dtype=np.uint8)
    pixels[:, width // 2 :] = 255
    return Image.fromarray(pixels)


def test_eval_resizes_the_shorter_side_then_crops_the_centre():
    transform = build_transforms(16, train=False, crop_pct=1.0, **HALF)
    out = transform(halves())  # 64 x 32 -> 32 x 16 -> centre 16 x 16: columns 8..23 of the resized
    assert out.shape == (3, 16, 16) and out.dtype == torch.float32
    assert torch.allclose(out[:, :, :7], torch.tensor(-1.0))
    assert torch.allclose(out[:, :, 9:], torch.tensor(1.0))


def test_eval_crop_pct_sets_the_resize():
    transform = build_transforms(224, train=False, crop_pct=0.875, **HALF)
    resize = next(t for t in transform.transforms if isinstance(t, v2.Resize))
    assert resize.size == [256]  # floor(224 / 0.875), timm's convention
    rect = build_transforms((32, 48), train=False, crop_pct=0.8, **HALF)
    assert next(t for t in rect.transforms if isinstance(t, v2.Resize)).size == [40, 60]
    assert rect(halves(100, 30)).shape == (3, 32, 48)


def test_normalisation_uses_the_given_mean_and_std():
    white = Image.new("RGB", (8, 8), (255, 255, 255))
    imagenet = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    out = build_transforms(8, train=False, crop_pct=1.0, **imagenet)(white)
    expected = (1 - torch.tensor(imagenet["mean"])) / torch.tensor(imagenet["std"])
    assert torch.allclose(out[:, 0, 0], expected, atol=1e-6)


def test_train_with_full_crop_and_no_flip_equals_eval_on_a_square_image():
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8))
    train = build_transforms(16, train=True, scale=(1.0, 1.0), ratio=(1.0, 1.0), hflip=False, **HALF)
    evaluate = build_transforms(16, train=False, crop_pct=1.0, **HALF)
    assert torch.allclose(train(image), evaluate(image), atol=1e-6)


def test_train_is_random_and_flips():
    torch.manual_seed(0)
    train = build_transforms(16, train=True, scale=(1.0, 1.0), ratio=(1.0, 1.0), **HALF)
    outs = [train(halves(32, 32)) for _ in range(20)]
    left_dark = [bool(out[0, 8, 0] < 0) for out in outs]
    assert any(left_dark) and not all(left_dark)  # both orientations occur


def test_tiny_digits_images_upsample_with_gentle_crops():
    digit = Image.fromarray(np.random.default_rng(1).integers(0, 256, (8, 8, 3), dtype=np.uint8))
    train = build_transforms(16, train=True, crop_pct=1.0, scale=(0.6, 1.0), hflip=False, **HALF)
    evaluate = build_transforms(16, train=False, crop_pct=1.0, **HALF)
    for transform in (train, evaluate):
        out = transform(digit)
        assert out.shape == (3, 16, 16) and -1.0 <= out.min() and out.max() <= 1.0
        assert out.std() > 0.3  # the random digit's pixels, not a flat image
    # Upsampling keeps each channel's mean brightness: the output is the digit, not a flat image.
    expected_mean = torch.tensor(np.asarray(digit).mean(axis=(0, 1)) / 255 * 2 - 1, dtype=torch.float32)
    torch.testing.assert_close(evaluate(digit).mean(dim=(1, 2)), expected_mean, atol=0.05, rtol=0)
    one_pixel = Image.new("RGB", (1, 1), (255, 0, 0))
    red = torch.tensor([1.0, -1.0, -1.0])[:, None, None].expand(3, 16, 16)
    for transform in (train, evaluate):
        torch.testing.assert_close(transform(one_pixel), red)


def test_randaugment_is_included_and_changes_images():
    image = Image.fromarray(np.random.default_rng(2).integers(0, 256, (32, 32, 3), dtype=np.uint8))
    transform = build_transforms(
        32, train=True, scale=(1.0, 1.0), ratio=(1.0, 1.0), hflip=False, randaugment=(2, 15), **HALF
    )
    augment = next(t for t in transform.transforms if isinstance(t, RandAugment))
    assert (augment.num_ops, augment.magnitude) == (2, 10)  # 15 acts as 10, timm's maximum
    torch.manual_seed(0)
    outs = torch.stack([transform(image) for _ in range(8)])
    assert (outs - outs[0]).abs().amax(dim=(1, 2, 3)).gt(0.1).any()


def test_transforms_pickle_for_dataloader_workers():
    transform = build_transforms(16, train=True, randaugment=(2, 10), **HALF)
    clone = pickle.loads(pickle.dumps(transform))
    assert isinstance(clone, v2.Compose)
    image = Image.fromarray(np.random.default_rng(3).integers(0, 256, (24, 24, 3), dtype=np.uint8))
    outputs = []
    for candidate in (transform, clone):
        random.seed(5), np.random.seed(5), torch.manual_seed(5)  # RandAugment draws from Python's random
        outputs.append(candidate(image))
    assert torch.equal(outputs[0], outputs[1]) and outputs[0].std() > 0.1  # the same random choices


@pytest.mark.parametrize(
    "options, match",
    [
        (dict(interpolation="lanczos9"), "interpolation"),
        (dict(crop_pct=0.0), "crop_pct"),
        (dict(scale=(0.5, 0.2)), "scale"),
        (dict(std=(0.5, 0.0, 0.5)), "std"),
    ],
)
def test_bad_options_name_the_option(options, match):
    with pytest.raises(ValueError, match=match):
        build_transforms(16, train=True, **{**HALF, **options})
    with pytest.raises(ValueError, match="image_size"):
        build_transforms(0, train=False, **HALF)


def test_random_erasing_fills_a_rectangle_of_the_normalised_image_with_noise():
    image = Image.fromarray(np.random.default_rng(4).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    preprocessing = SimpleNamespace(mean=(0.5,) * 3, std=(0.5,) * 3, crop_pct=1.0, interpolation="bicubic")
    augment = dict(
        crop_scale=(1.0, 1.0),
        crop_ratio=(1.0, 1.0),
        hflip=False,
        randaugment=None,
        rotation=0.0,
        zoom=0.0,
        fill_mode="reflect",
    )
    plain = train_transform(64, preprocessing, SimpleNamespace(**augment, reprob=0.0))
    assert not any(isinstance(t, v2.RandomErasing) for t in plain.transforms)
    erasing = train_transform(64, preprocessing, SimpleNamespace(**augment, reprob=1.0))
    for seed in range(3):
        torch.manual_seed(seed)
        before = plain(image)
        torch.manual_seed(seed)
        after = erasing(image)  # the same crop, then one erased rectangle
        changed = (after != before).all(dim=0)
        rows, cols = changed.any(dim=1).nonzero().squeeze(1), changed.any(dim=0).nonzero().squeeze(1)
        box = changed[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
        assert box.all() and int(changed.sum()) == box.numel()  # a rectangle, in every channel
        assert 0.02 <= box.numel() / changed.numel() <= 1 / 3
        noise = after[:, changed]  # standard-normal noise in normalised units, as timm's pixel mode draws it
        assert abs(float(noise.mean())) < 0.3 and 0.8 < float(noise.std()) < 1.2


def _old_to_tensor(mean, std) -> v2.Compose:
    """The three v2 steps that build_transforms ended with before ToNormalized."""
    return v2.Compose(
        [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean=list(mean), std=list(std))]
    )


@pytest.mark.parametrize("mean, std", [((0.5,) * 3, (0.5,) * 3), ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
def test_to_normalized_is_bit_for_bit_the_old_three_steps(mean, std):
    from vitlab.data.transforms import ToNormalized

    pixels = np.random.default_rng(1).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    image = Image.fromarray(pixels)
    old, new = _old_to_tensor(mean, std)(image), ToNormalized(mean, std)(image)
    assert new.shape == (3, 37, 53) and new.dtype == torch.float32 and new.std() > 0.5
    assert torch.equal(new, old.as_subclass(torch.Tensor))
    assert torch.equal(ToNormalized(mean, std)(torch.from_numpy(pixels).permute(2, 0, 1)), new)


def test_training_transform_output_is_the_old_pipelines():
    """The same seed gives the same augmented tensor as the pipeline ending in the v2 steps."""
    image = Image.fromarray(np.random.default_rng(2).integers(0, 256, (40, 60, 3), dtype=np.uint8))
    new = build_transforms(24, train=True, randaugment=(2, 10), **HALF)
    old = v2.Compose([*new.transforms[:-1], _old_to_tensor(HALF["mean"], HALF["std"])])
    for seed in range(4):
        random.seed(seed), torch.manual_seed(seed)
        expected = old(image).as_subclass(torch.Tensor)
        random.seed(seed), torch.manual_seed(seed)
        assert torch.equal(new(image), expected)
