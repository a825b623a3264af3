"""Each recipe's optimiser and learning-rate schedule, checked at chosen steps, and the Keras example's model."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

from helpers import state_of
from vitlab.model import ViTConfig, create_untrained
from vitlab.training import RECIPES, TrainConfig, Trainer, get_recipe
from vitlab.training.config import ModelSpec, apply_mapping
from vitlab.training.optim import TfaAdamW, build_optimizer, build_schedule, param_groups
from vitlab.training.run_parts import scratch_config

pytestmark = pytest.mark.unit

STEPS_PER_EPOCH = 100


def tiny_model() -> nn.Module:
    return create_untrained("mu/4", image_size=8, num_classes=3)


def lr_at(recipe: str, steps: list[int]) -> tuple[torch.optim.Optimizer, list[float]]:
    """The learning rate each of `steps` (0-based optimiser steps) runs with."""
    config = get_recipe(recipe)
    optimizer = build_optimizer(tiny_model(), config.optim)
    schedule = build_schedule(optimizer, config.schedule, STEPS_PER_EPOCH)
    factor = schedule.lr_lambdas[0]
    return optimizer, [config.optim.lr * factor(step) for step in steps]


def cosine(progress: float) -> float:
    return 0.5 * (1 + math.cos(math.pi * progress))


@pytest.mark.parametrize(
    "recipe, optimiser, hyper, weight_decay, steps, expected",
    [
        # Table 3 JFT row: 7 epochs (700 steps here, warm-up 10k > 700: the run stays in warm-up).
        (
            "paper-pretrain",
            torch.optim.AdamW,
            {"betas": (0.9, 0.999)},
            0.1,
            [0, 499, 699],
            [8e-4 / 10_000, 8e-4 * 500 / 10_000, 8e-4 * 700 / 10_000],
        ),
        # Table 3 ImageNet row: 300 epochs = 30k steps, 10k warm-up, cosine.
        (
            "paper-pretrain:imagenet",
            torch.optim.AdamW,
            {"betas": (0.9, 0.999)},
            0.3,
            [9_999, 20_000, 29_999],
            [3e-3, 3e-3 * cosine(0.5), 3e-3 * cosine(19_999 / 20_000)],
        ),
        # Table 4 CIFAR-10: 10k steps, 500 warm-up, cosine, SGD momentum 0.9, no decay.
        (
            "paper-finetune",
            torch.optim.SGD,
            {"momentum": 0.9},
            0.0,
            [0, 499, 5_250, 10_000],
            [0.03 / 500, 0.03, 0.015, 0.0],
        ),
        # Pets: 500 steps, BiT-HyperRule's 100 warm-up steps, then cosine to the end.
        (
            "paper-finetune:pets",
            torch.optim.SGD,
            {"momentum": 0.9},
            0.0,
            [0, 99, 300, 499],
            [0.03 / 100, 0.03, 0.03 * cosine(200 / 400), 0.03 * cosine(399 / 400)],
        ),
        ("paper-finetune:vtab", torch.optim.SGD, {"momentum": 0.9}, 0.0, [499, 1_500], [0.01, 0.005]),
        # small-data: 5 warm-up epochs (500 steps), cosine over 200 epochs (20k steps).
        (
            "small-data",
            torch.optim.AdamW,
            {"betas": (0.9, 0.999)},
            0.05,
            [0, 499, 10_250, 20_000],
            [1e-3 / 500, 1e-3, 5e-4, 0.0],
        ),
        # keras-example: tfa's AdamW (every variable decayed), constant 1e-3, no warm-up.
        ("keras-example", TfaAdamW, {"betas": (0.9, 0.999), "eps": 1e-7}, 1e-4, [0, 5_000, 9_999], [1e-3] * 3),
        # demo: 100 warm-up steps, cosine to step 1200.
        ("demo", torch.optim.AdamW, {"betas": (0.9, 0.999)}, 0.05, [0, 99, 650, 1_200], [2e-5, 2e-3, 1e-3, 0.0]),
    ],
)
def test_recipe_optimiser_and_schedule(recipe, optimiser, hyper, weight_decay, steps, expected):
    optimizer, lrs = lr_at(recipe, steps)
    assert type(optimizer) is optimiser
    for name, value in hyper.items():
        assert all(group[name] == value for group in optimizer.param_groups)
    decays = sorted({group["weight_decay"] for group in optimizer.param_groups})
    assert decays == ([weight_decay] if optimiser is TfaAdamW else sorted({0.0, weight_decay}))
    assert lrs == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_schedule_drives_the_optimiser():
    """LambdaLR sets the rate each step runs with: step s uses factor(s)."""
    config = get_recipe("demo")
    model = tiny_model()
    optimizer = build_optimizer(model, config.optim)
    schedule = build_schedule(optimizer, config.schedule, STEPS_PER_EPOCH)
    seen = []
    for _ in range(102):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert seen[0] == pytest.approx(2e-3 / 100) and seen[99] == pytest.approx(2e-3)
    assert seen[100] == pytest.approx(2e-3) and seen[101] == pytest.approx(2e-3 * cosine(1 / 1100))


def test_recipe_fixed_values():
    finetune, pretrain = get_recipe("paper-finetune:imagenet"), get_recipe("paper-pretrain:imagenet21k")
    assert (finetune.schedule.steps, finetune.optim.ema_decay, finetune.optim.grad_clip) == (20_000, None, 1.0)
    assert (finetune.data.batch_size, finetune.model.image_size) == (512, 384)
    assert (pretrain.data.batch_size, pretrain.optim.grad_accum, pretrain.micro_batch_size) == (4096, 32, 128)
    assert (pretrain.model.dropout, pretrain.optim.weight_decay, pretrain.schedule.decay) == (0.1, 0.03, "linear")
    small = get_recipe("small-data")
    assert (small.augment.mixup, small.augment.cutmix, small.augment.label_smoothing) == (0.8, 1.0, 0.1)
    assert (small.augment.randaugment, small.model.drop_path) == ((2, 10), 0.1)


def test_no_weight_decay_on_norms_biases_tokens_and_position_embeddings():
    model = tiny_model()
    decayed, free = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    free_names = {names[id(p)] for p in free["params"]}
    assert free["weight_decay"] == 0.0 and decayed["weight_decay"] == 0.1
    assert free_names == model.no_weight_decay()
    assert {"cls_token", "pos_embed.weight", "norm.weight", "blocks.0.attn.qkv.bias"} <= free_names
    assert {names[id(p)] for p in decayed["params"]} == {
        "patch_embed.proj.weight",
        "blocks.0.attn.qkv.weight",
        "blocks.0.attn.proj.weight",
        "blocks.0.mlp.fc1.weight",
        "blocks.0.mlp.fc2.weight",
        "head.weight",
    }


def test_keras_example_model_is_the_keras_model():
    """The Keras example's layers for CIFAR-100, counted one by one: patch Dense 108*64+64 = 6,976; position
    Embedding 144*64 = 9,216; 8 blocks of 2 LayerNorms (256), MultiHeadAttention with 4 heads of key size
    64 (3*(64*256+256) + 256*64+64 = 66,368) and Dense(128) + Dense(64) (16,576); the final LayerNorm (128);
    the head 9216->2048->1024->100 (21,077,092). No class token, all patch outputs flattened."""
    expected = 6_976 + 9_216 + 8 * (256 + 66_368 + 16_576) + 128 + (9216 * 2048 + 2048) + (2048 * 1024 + 1024) + 102_500
    config = scratch_config(get_recipe("keras-example").model).replace(num_classes=100)
    with torch.device("meta"):
        model = create_untrained(config)
    assert sum(p.numel() for p in model.parameters()) == expected == 21_759_012
    assert model.cls_token is None and config.pool == "flatten" and config.num_patches == 144
    assert config.attn_head_dim == 64 and model.blocks[0].attn.qkv.out_features == 3 * 4 * 64
    assert isinstance(model.blocks[0].mlp.out_act, nn.GELU)  # Dense(128, gelu) -> Dense(64, gelu)


def test_mlp_out_act_is_off_by_default_and_changes_the_output():
    plain = create_untrained("mu/4", image_size=8, num_classes=3)
    assert isinstance(plain.blocks[0].mlp.out_act, nn.Identity) and not ViTConfig().mlp_out_act
    keras_like = create_untrained(plain.config.replace(mlp_out_act=True))
    keras_like.load_state_dict(plain.state_dict())  # same parameters: the option adds no weights
    images = torch.randn(2, 3, 8, 8)
    mlp_input = torch.randn(2, 5, 32)
    expected = nn.functional.gelu(plain.blocks[0].mlp.fc2(nn.functional.gelu(plain.blocks[0].mlp.fc1(mlp_input))))
    torch.testing.assert_close(keras_like.blocks[0].mlp(mlp_input), expected)
    assert not torch.allclose(plain.forward_features(images), keras_like.forward_features(images))


def test_mlp_out_act_survives_save_and_load(tmp_path):
    from vitlab import load

    model = create_untrained("mu/4", image_size=8, num_classes=3, mlp_out_act=True)
    model.save_pretrained(tmp_path)
    assert load(tmp_path).config.mlp_out_act is True


# Every recipe of the registry, shrunk by one rule: a tiny model (mu/4 at 16 px), batch 4 with no gradient
# accumulation, on the digits scikit-learn ships. Its optimiser, schedule and augmentation stay the recipe's.
SHRINK = {
    "model": {"variant": "mu/4", "image_size": 16},
    "data": {"source": "digits", "batch_size": 4},
    "optim": {"grad_accum": 1},
}
OPTIMISERS = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD, "tfa_adamw": TfaAdamW}


def shrunk(name: str, out) -> tuple[TrainConfig, TrainConfig]:
    """(the shrunk config, the recipe as it is)."""
    config = get_recipe(name)
    config.model = ModelSpec(**SHRINK["model"])  # the whole model replaced, not only its size
    changes = {"data": SHRINK["data"], "optim": SHRINK["optim"], "run": {"out": str(out)}}
    config = apply_mapping(config, changes, "shrink")
    return config, get_recipe(name)


@pytest.mark.parametrize("name", list(RECIPES))
def test_every_recipe_builds_and_takes_two_steps(name, tmp_path):
    config, recipe = shrunk(name, tmp_path)
    trainer = Trainer(config)
    try:
        assert type(trainer.optimizer) is OPTIMISERS[recipe.optim.name]
        assert trainer.config.optim == dataclasses.replace(recipe.optim, grad_accum=1)
        assert (trainer.config.schedule, trainer.config.augment) == (recipe.schedule, recipe.augment)
        assert trainer.model.config.image_size == (16, 16) and trainer.config.micro_batch_size == 4
        reference = build_schedule(
            build_optimizer(tiny_model(), recipe.optim), recipe.schedule, trainer.steps_per_epoch
        ).lr_lambdas[0]
        before = state_of(trainer.model)
        batches = iter(trainer.train_loader)
        losses = [trainer.train_step([next(batches)]) for _ in range(2)]
        assert all(math.isfinite(loss) and loss > 0 for loss in losses), losses
        after = state_of(trainer.model)
        classifier = ("head.weight",) if recipe.objective.name == "classify" else ()  # mpp: the model has none
        for layer in ("patch_embed.proj.weight", "blocks.0.attn.qkv.weight", *classifier):
            assert not torch.equal(before[layer], after[layer]), layer  # the gradient reached every layer
        assert trainer.lr == pytest.approx(recipe.optim.lr * reference(2), rel=1e-9)  # the recipe's schedule
    finally:
        trainer.close()
