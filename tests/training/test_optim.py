"""Optimiser parameter groups: layer-wise learning-rate decay equal to timm's, and frozen layers
(model.trainable_blocks) left out of the optimiser and unchanged by training."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from timm.models.vision_transformer import VisionTransformer as TimmViT
from timm.optim import param_groups_layer_decay

from helpers import state_of, tiny_config
from vitlab.errors import ConfigError
from vitlab.model import config_for, create_untrained
from vitlab.training import Trainer
from vitlab.training.config import OptimSpec
from vitlab.training.layer_groups import freeze_layers
from vitlab.training.optim import build_optimizer, layer_decay_groups
from vitlab.weights.keys import rename_keys
from vitlab.weights.timm import RULES as TIMM_TO_VITLAB

DEPTH = 3


def _pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    ours = create_untrained(config_for("Ti/16", num_classes=5, depth=DEPTH, image_size=32))
    theirs = TimmViT(
        img_size=32,
        patch_size=16,
        embed_dim=192,
        depth=DEPTH,
        num_heads=3,
        num_classes=5,
    )
    return ours, theirs


def _timm_groups(model: torch.nn.Module, layer_decay: float) -> set[tuple[frozenset[str], float, float]]:
    """timm's groups with their parameters named as vitlab names them."""
    names: dict[str, Any] = {name: name for name, _ in model.named_parameters()}
    vitlab_name: dict[str, Any] = rename_keys(names, TIMM_TO_VITLAB)
    timm_name = {id(param): name for name, param in model.named_parameters()}
    by_timm = {old: new for new, old in vitlab_name.items()}
    no_decay: Any = model.no_weight_decay  # timm's names: pos_embed, cls_token, ...
    groups = param_groups_layer_decay(
        model,
        weight_decay=0.05,
        no_weight_decay_list=no_decay(),
        layer_decay=layer_decay,
    )
    return {
        (
            frozenset(by_timm[timm_name[id(p)]] for p in g["params"]),
            g["lr_scale"],
            g["weight_decay"],
        )
        for g in groups
    }


def _our_groups(model: torch.nn.Module, layer_decay: float) -> set[tuple[frozenset[str], float, float]]:
    return {
        (frozenset(g["param_names"]), g["lr_scale"], g["weight_decay"])
        for g in layer_decay_groups(model, 0.05, layer_decay)
    }


@pytest.mark.unit
def test_layer_decay_groups_equal_timms():
    ours, theirs = _pair()
    groups = _our_groups(ours, 0.75)
    assert groups == _timm_groups(theirs, 0.75)
    # embeddings, DEPTH blocks (the final norm with the last) and the head: a decayed and an undecayed group each
    assert len(groups) == 2 * (DEPTH + 2)
    assert {scale for _, scale, _ in groups} == {0.75**k for k in range(DEPTH + 2)}
    undecayed = set().union(*(names for names, _, decay in groups if decay == 0.0))
    assert {
        "cls_token",
        "pos_embed.weight",
        "head.bias",
        "norm.weight",
        "blocks.0.attn.qkv.bias",
    } <= undecayed
    assert "blocks.0.attn.qkv.weight" not in undecayed
    scale = {name: s for names, s, _ in groups for name in names}
    assert scale["head.weight"] == 1.0 and scale["norm.weight"] == 0.75 and scale["pos_embed.weight"] == 0.75**4

    # frozen parameters leave both sides' groups alike
    freeze_layers(ours, 1)
    for name, param in theirs.named_parameters():
        param.requires_grad_(name.startswith(("blocks.2.", "norm.", "head.")))
    assert _our_groups(ours, 0.65) == _timm_groups(theirs, 0.65)


@pytest.mark.unit
def test_layer_decay_sets_each_groups_learning_rate():
    ours, _ = _pair()
    optimizer = build_optimizer(ours, OptimSpec(lr=0.01, weight_decay=0.05, layer_decay=0.5))
    assert [g["lr"] for g in optimizer.param_groups] == [0.01 * g["lr_scale"] for g in optimizer.param_groups]
    assert optimizer.param_groups[0]["lr"] == 0.01  # the head's: the rate the trainer logs
    assert min(g["lr"] for g in optimizer.param_groups) == 0.01 * 0.5 ** (DEPTH + 1)


@pytest.mark.integration
def test_frozen_layers_stay_bitwise_unchanged(tmp_path, caplog):
    config = tiny_config(
        tmp_path,
        model={"depth": 2, "trainable_blocks": 1},
        schedule={"steps": 3},
        run={"eval_every": 3},
    )
    with caplog.at_level(logging.INFO, logger="vitlab"):
        trainer = Trainer(config)
    before = state_of(trainer.model)
    trained = {name for name, param in trainer.model.named_parameters() if param.requires_grad}
    assert trained == {
        name for name, _ in trainer.model.named_parameters() if name.startswith(("blocks.1.", "norm.", "head."))
    }
    in_optimizer = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert in_optimizer == {id(p) for p in trainer.model.parameters() if p.requires_grad}
    count = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    assert f"{count} of {sum(p.numel() for p in trainer.model.parameters())} parameters train" in caplog.text
    trainer.fit()
    after = state_of(trainer.model)
    frozen = [name for name, _ in trainer.model.named_parameters() if name not in trained]
    assert frozen and all(torch.equal(before[name], after[name]) for name in frozen)
    assert all(not torch.equal(before[name], after[name]) for name in trained)


@pytest.mark.unit
@pytest.mark.fault("bad-config", kinds=3)
def test_bad_freezing_and_layer_decay_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"model.trainable_blocks=2: the model has 1 blocks"):
        Trainer(tiny_config(tmp_path, model={"trainable_blocks": 2}))
    with pytest.raises(ConfigError, match=r"optim.layer_decay=1.5: must be in \(0, 1\]"):
        tiny_config(tmp_path, optim={"layer_decay": 1.5}).validate()
    with pytest.raises(ConfigError, match=r"optim.layer_decay=0.7: needs parameter groups"):
        tiny_config(tmp_path, optim={"layer_decay": 0.7, "name": "tfa_adamw"}).validate()
