"""Fine-tuning (paper Sec. 3.2): the pre-training head goes, a zero-initialised head for the new classes
comes, E_pos is resampled in 2-D for a new resolution, and everything else starts from the checkpoint."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from helpers import randomise_, tiny_config
from vitlab import load
from vitlab.model import ConfigError, create_untrained, resample_pos_embed
from vitlab.training import Trainer


@pytest.fixture
def pretrained(tmp_path):
    """A pre-trained-like checkpoint: 5 classes at 8 px (a 2x2 grid), with the tanh pre-logits layer."""
    model = create_untrained("mu/4", image_size=8, num_classes=5, representation_size=16, class_names=list("abcde"))
    randomise_(model)
    model.save_pretrained(tmp_path / "pretrained")
    return model, tmp_path / "pretrained"


def finetune_config(out, init, **model):
    return tiny_config(
        out,
        recipe="paper-finetune",
        model={"init": str(init), **model},
        schedule={"steps": 4, "warmup_steps": 2},
        run={"eval_every": 4},
    )


@pytest.mark.integration
def test_head_reset_and_resolution_change(tmp_path, pretrained, caplog):
    source, path = pretrained
    with caplog.at_level(logging.INFO, logger="vitlab"):
        trainer = Trainer(finetune_config(tmp_path / "ft", path, image_size=16))
    assert any(
        "new zero-initialised head: 32 x 10 (10 classes), replacing a representation layer and the "
        "5-class head" in r.getMessage()
        for r in caplog.records
    )
    model = trainer.model
    assert model.config.num_classes == 10 and model.config.class_names == [str(d) for d in range(10)]
    assert model.config.representation_size is None and isinstance(model.pre_logits, nn.Identity)
    assert torch.count_nonzero(model.head.weight) == 0 and torch.count_nonzero(model.head.bias) == 0
    assert model.head.weight.shape == (10, 32)
    # E_pos: (1, 1 + 2*2, D) -> (1, 1 + 4*4, D), resampled in 2-D; the class slot is kept.
    assert model.config.image_size == (16, 16) and model.pos_embed.weight.shape == (1, 17, 32)
    expected = resample_pos_embed(source.pos_embed.weight, (4, 4), (2, 2), num_prefix_tokens=1)
    torch.testing.assert_close(model.pos_embed.weight, expected)
    torch.testing.assert_close(model.pos_embed.weight[:, :1], source.pos_embed.weight[:, :1])
    # The encoder starts from the checkpoint.
    for name in ("patch_embed.proj.weight", "cls_token", "blocks.0.attn.qkv.weight", "norm.weight"):
        torch.testing.assert_close(model.state_dict()[name], source.state_dict()[name], msg=name)
    assert type(trainer.optimizer) is torch.optim.SGD

    result = trainer.fit()
    reloaded = load(result.out)
    assert reloaded.config.image_size == (16, 16) and reloaded.config.num_classes == 10
    assert torch.count_nonzero(reloaded.head.weight) > 0  # trained, no longer the zero init


@pytest.mark.unit
def test_same_resolution_and_class_count_still_gets_a_fresh_head(tmp_path):
    source = randomise_(create_untrained("mu/4", image_size=8, num_classes=10))
    source.save_pretrained(tmp_path / "ten")
    model = Trainer(finetune_config(tmp_path / "ft", tmp_path / "ten")).model
    assert model.config.image_size == (8, 8)
    assert torch.count_nonzero(model.head.weight) == 0
    torch.testing.assert_close(model.pos_embed.weight, source.pos_embed.weight)


@pytest.mark.unit
def test_architecture_cannot_change_when_fine_tuning(tmp_path, pretrained):
    with pytest.raises(ConfigError, match="model.depth cannot change the architecture of model.init="):
        Trainer(finetune_config(tmp_path / "ft", pretrained[1], depth=2))


@pytest.mark.unit
def test_image_size_must_fit_the_patch_size(tmp_path, pretrained):
    with pytest.raises(ConfigError, match="not divisible by patch size 4"):
        Trainer(finetune_config(tmp_path / "ft", pretrained[1], image_size=18))
