"""Run options that must not change what is learned (gradient checkpointing, torch.compile), and
weight averaging (EMA), whose weights are the ones evaluated and saved."""

from __future__ import annotations

import inspect

import pytest
import torch

from helpers import assert_bitwise_equal, state_of, tiny_config
from vitlab import load
from vitlab.training import Trainer

SHORT = {"schedule": {"steps": 6}, "run": {"eval_every": 6}, "model": {"dropout": 0.1, "drop_path": 0.1}}


@pytest.mark.integration
def test_gradient_checkpointing_changes_no_number(tmp_path):
    """Recomputing the blocks in the backward pass replays their dropout masks (the RNG state is kept)."""
    plain = Trainer(tiny_config(tmp_path / "plain", **SHORT))
    plain.fit()
    config = tiny_config(tmp_path / "ckpt", **SHORT)
    config.run.grad_checkpointing = True
    recomputed = Trainer(config)
    assert recomputed.model.grad_checkpointing
    recomputed.fit()
    assert_bitwise_equal(state_of(plain.model), state_of(recomputed.model))


@pytest.mark.integration
def test_ema_weights_are_evaluated_and_saved(tmp_path):
    config = tiny_config(tmp_path, **SHORT)
    config.optim.ema_decay = 0.5
    trainer = Trainer(config)
    result = trainer.fit()
    assert result.summary["ema"] is True and result.model is trainer.ema.module
    saved = state_of(load(tmp_path))
    assert_bitwise_equal(saved, state_of(trainer.ema.module))
    assert not torch.equal(saved["head.weight"], trainer.model.state_dict()["head.weight"])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_compiled_training_runs_and_saves_the_plain_model(tmp_path):
    config = tiny_config(tmp_path, schedule={"steps": 4}, run={"eval_every": 4, "compile": True})
    trainer = Trainer(config)
    result = trainer.fit()
    assert trainer.network is not trainer.model  # the compiled module trains, the plain one is saved
    assert set(load(tmp_path).state_dict()) == set(trainer.model.state_dict())
    assert torch.isfinite(torch.tensor(result.summary["val_loss"]))


@pytest.mark.integration
def test_vitlab_train_runs_a_recipe_and_stays_a_function(tmp_path):
    """`vitlab.train("recipe", section=...)` is the Python twin of `vitlab train`: a plain function,
    also once the package that holds it, vitlab.training, and its modules are imported."""
    import vitlab
    import vitlab.training.recipes as recipes

    assert "demo" in recipes.RECIPES
    assert inspect.isfunction(vitlab.train) and vitlab.train is vitlab.training.train
    result = vitlab.train(
        "small-data",
        model={"variant": "mu/4", "image_size": 8},
        data={"source": "digits", "batch_size": 32},
        schedule={"steps": 4, "warmup_steps": 1},
        run={"out": str(tmp_path), "threads": 1},
    )
    assert result.summary["steps"] == 4 and 0.0 <= result.summary["val_top1"] <= 1.0
    assert load(tmp_path).config.patch_size == 4
    with pytest.raises(Exception, match="schedule.stepz"):
        vitlab.train("small-data", schedule={"stepz": 4}, run={"out": str(tmp_path / "bad")})
