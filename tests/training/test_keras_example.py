"""The keras-example recipe is the Keras ViT example (keras.io, CIFAR-100, TF 2.4 with TensorFlow Addons):
its dropout placement, tfa's AdamW, its augmentation layers, validation split and best-epoch weights."""

from __future__ import annotations

import math

import pytest
import torch

from vitlab.data.keras_augment import RandomRotation, RandomZoom, zoom
from vitlab.data.transforms import train_transform
from vitlab.model import create_untrained
from vitlab.model.config import Preprocessing
from vitlab.training import get_recipe
from vitlab.training.optim import TfaAdamW, build_optimizer
from vitlab.training.run_parts import scratch_config


def keras_model(**changes):
    config = scratch_config(get_recipe("keras-example").model).replace(num_classes=100, **changes)
    with torch.device("meta"):
        return create_untrained(config)


@pytest.mark.unit
def test_dropout_only_where_keras_has_it():
    model = keras_model()
    block = model.blocks[0]
    assert (
        model.pos_drop.p == 0.0 and block.attn.proj_drop.p == 0.0
    )  # Keras: neither after E_pos nor after MHA's output
    assert block.attn.attn_dropout == 0.1 and block.mlp.drop1.p == block.mlp.drop2.p == 0.1  # MHA(dropout=.1), mlp()
    paper = create_untrained(
        "mu/4", image_size=8, num_classes=3, dropout=0.1
    )  # the paper's placement stays the default
    assert paper.pos_drop.p == 0.1 and paper.blocks[0].attn.proj_drop.p == 0.1


@pytest.mark.unit
def test_tfa_adamw_step_is_keras_adam_after_an_unscaled_decay():
    """One step by hand: w <- w - wd w, then w <- w - lr sqrt(1 - b2) / (1 - b1) m / (sqrt(v) + eps)."""
    weight = torch.nn.Parameter(torch.tensor([2.0, -1.0], dtype=torch.float64))
    weight.grad = torch.tensor([0.5, 1e-6], dtype=torch.float64)  # the second: sqrt(v) near eps
    lr, wd, eps, (b1, b2) = 1e-3, 1e-4, 1e-7, (0.9, 0.999)
    TfaAdamW([weight], lr=lr, weight_decay=wd, eps=eps).step()
    expected = []
    for w, g in ((2.0, 0.5), (-1.0, 1e-6)):
        m, v = (1 - b1) * g, (1 - b2) * g * g
        expected.append(w - wd * w - lr * math.sqrt(1 - b2) / (1 - b1) * m / (math.sqrt(v) + eps))
    torch.testing.assert_close(weight.detach(), torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12)
    torch_adamw = torch.nn.Parameter(torch.tensor([2.0, -1.0], dtype=torch.float64))
    torch_adamw.grad = weight.grad.clone()
    torch.optim.AdamW([torch_adamw], lr=lr, weight_decay=wd, eps=eps).step()
    assert abs(float(torch_adamw.detach()[0]) - expected[0]) > 1e-4  # torch scales the decay by lr: 1000x smaller here
    torch_adam = torch.nn.Parameter(torch.tensor([-1.0], dtype=torch.float64))
    torch_adam.grad = torch.tensor([1e-6], dtype=torch.float64)
    torch.optim.Adam([torch_adam], lr=lr, eps=eps).step()
    assert abs((float(torch_adam.detach()[0]) + 1.0) - (expected[1] + 1.0 - wd)) > 1e-5  # eps on the corrected sqrt(v)


@pytest.mark.unit
def test_tfa_adamw_decays_every_variable():
    model = create_untrained("mu/4", image_size=8, num_classes=3)
    optimizer = build_optimizer(model, get_recipe("keras-example").optim)
    (group,) = optimizer.param_groups
    assert len(group["params"]) == len(list(model.parameters())) and group["weight_decay"] == 1e-4
    assert (type(optimizer), group["eps"]) == (TfaAdamW, 1e-7)


@pytest.mark.unit
def test_recipe_values():
    config = get_recipe("keras-example")
    assert (config.data.batch_size, config.schedule.epochs, config.schedule.decay) == (256, 100, "constant")
    assert (config.data.dev_fraction, config.data.dev_split, config.run.keep_best) == (0.1, "last", True)
    assert (config.optim.lr, config.optim.grad_clip, config.augment.label_smoothing) == (1e-3, None, 0.0)
    assert (config.augment.rotation, config.augment.zoom, config.augment.fill_mode) == (7.2, 0.2, "reflect")


@pytest.mark.unit
def test_augmentation_is_keras_layers_in_keras_order():
    config = get_recipe("keras-example")
    preprocessing = Preprocessing(mean=config.data.mean, std=config.data.std, crop_pct=1.0, interpolation="bilinear")
    transform = train_transform((72, 72), preprocessing, config.augment)
    rotation, zoom_layer = transform.transforms[-2:]
    assert isinstance(rotation, RandomRotation) and rotation.factor == pytest.approx(0.02)
    assert isinstance(zoom_layer, RandomZoom) and (zoom_layer.height_factor, zoom_layer.width_factor) == (0.2, 0.2)
    from PIL import Image

    assert transform(Image.new("RGB", (32, 32), (10, 200, 30))).shape == (3, 72, 72)


@pytest.mark.unit
def test_zoom_is_drawn_per_axis():
    layer = RandomZoom(0.2, 0.2)
    torch.manual_seed(0)
    draws = torch.tensor([layer.draw() for _ in range(400)])
    assert draws.min() >= 0.8 and draws.max() <= 1.2
    assert (draws[:, 0] - draws[:, 1]).abs().mean() > 0.1  # independent, not one isotropic factor
    square = torch.zeros(1, 21, 21)
    square[:, 5:16, 5:16] = 1.0
    wide = zoom(square, zoom_y=1.0, zoom_x=0.5, fill_mode="constant")  # zoom in on x only
    rows, columns = (wide[0] > 0.5).any(dim=1).sum(), (wide[0] > 0.5).any(dim=0).sum()
    assert int(rows) == 11 and int(columns) == 21


@pytest.mark.unit
def test_reflect_fill_shows_the_image_beyond_its_border():
    image = torch.arange(10.0).repeat(10, 1).unsqueeze(0)  # column index as the value
    reflected = zoom(image, 1.2, 1.2, fill_mode="reflect")
    constant = zoom(image, 1.2, 1.2, fill_mode="constant")
    assert float(constant[0, 0, 9]) < 8.0 and float(reflected[0, 0, 9]) > 8.9  # the right edge: 0 beyond vs reflected
    flat = torch.full((3, 12, 12), 0.7)
    torch.manual_seed(1)
    assert torch.allclose(RandomRotation(0.02)(flat), flat) and torch.allclose(RandomZoom(0.2, 0.2)(flat), flat)
    assert not torch.allclose(zoom(flat, 1.2, 1.2, "constant"), flat)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_tiny_keras_example_run_keeps_its_best_epoch_and_reports_the_test_split(tmp_path):
    from helpers import tiny_config
    from vitlab.training import Trainer

    config = tiny_config(
        tmp_path / "keras",
        "keras-example",
        model={"image_size": 12, "head_hidden": [32, 16]},
        data={"batch_size": 128},
        schedule={"epochs": 2, "steps": None, "warmup_steps": 0},
        run={"eval_every": None},
    )
    summary = Trainer(config).fit().summary
    assert summary["dev_images"] == 1437 - int(1437 * 0.9) and summary["test_images"] == 360
    assert summary["best_step"] in (10, 20) and summary["steps"] == 20  # 1293 // 128 = 10 steps an epoch
