"""Masked patch prediction (paper Sec. 4.6, Appendix B.1.2): the corruption's statistics, the colour
targets against hand-computed patches, a pre-training run that learns and fine-tunes, bad configs."""

from __future__ import annotations

import json
import logging
import math

import pytest
import torch

from helpers import one_line_error, tiny_config, write_class_folders
from vitlab import load
from vitlab.cli import main
from vitlab.model import ConfigError, config_for
from vitlab.training import Trainer
from vitlab.training.masked_patch import (
    KEPT,
    MASKED,
    RANDOM,
    UNTOUCHED,
    colour_class,
    corrupt_patches,
    downsized_target,
    mean_colour_target,
)
from vitlab.training.objectives import HEAD

MPP = {"objective": {"name": "mpp"}, "augment": {"label_smoothing": 0.0}}
SMALL = {"variant": "mu/4", "image_size": 8, "dim": 32, "depth": 2, "num_heads": 2, "mlp_dim": 64}


@pytest.mark.unit
def test_corruption_halves_the_patches_and_splits_them_80_10_10_within_sampling_error():
    batch, count, dim, draws = 64, 16, 3, 40
    # Every patch embedding distinct (its index in the batch), so that each output can be traced.
    tokens = torch.arange(batch * count, dtype=torch.float32).repeat_interleave(dim).reshape(batch, count, dim)
    mask = torch.full((dim,), -7.0)
    generator = torch.Generator().manual_seed(0)
    tallies = dict.fromkeys((MASKED, RANDOM, KEPT), 0)
    for _ in range(draws):
        out, kind = corrupt_patches(tokens, mask, generator)
        assert ((kind != UNTOUCHED).sum(dim=1) == count // 2).all()  # exactly half of each image's patches
        for value in tallies:
            tallies[value] += int((kind == value).sum())
        untouched_or_kept = (kind == UNTOUCHED) | (kind == KEPT)
        assert torch.equal(out[untouched_or_kept], tokens[untouched_or_kept])
        assert (out[kind == MASKED] == -7.0).all()
        borrowed = out[kind == RANDOM][:, 0]  # the index of the patch each one was taken from
        own = tokens[kind == RANDOM][:, 0]
        assert (borrowed != own).all() and (borrowed >= 0).all() and (borrowed < batch * count).all()
    corrupted = draws * batch * count // 2
    for value, share in ((MASKED, 0.8), (RANDOM, 0.1), (KEPT, 0.1)):
        # Each corrupted patch picks its treatment independently: a binomial count; 4 standard deviations.
        tolerance = 4 * math.sqrt(corrupted * share * (1 - share))
        assert abs(tallies[value] - corrupted * share) < tolerance, (value, tallies[value], corrupted * share)


@pytest.mark.unit
def test_the_mean_colour_target_is_the_3_bit_class_of_the_patch_mean():
    pixels = torch.zeros(1, 3, 8, 8)  # four 4x4 patches, row-major: top-left, top-right, bottom-left, ...
    pixels[0, :, :4, :4] = torch.tensor([0.3, 0.6, 0.95])[:, None, None]  # bins 2, 4, 7
    pixels[0, 0, :4, 4:6] = 1.0  # top-right: red mean 0.5 (bin 4), green 0, blue mean 0.25 (bin 2)
    pixels[0, 2, :2, 4:8] = 0.5
    pixels[0, :, 4:, 4:] = 1.0  # bottom-right white: bin 7 each (1.0 falls in the top bin)
    expected = [2 * 64 + 4 * 8 + 7, 4 * 64 + 0 * 8 + 2, 0, 511]
    assert mean_colour_target(pixels, 4).tolist() == [expected]
    assert colour_class(torch.tensor([0.125 - 1e-6, 0.125, 0.999])).item() == 0 * 64 + 1 * 8 + 7


@pytest.mark.unit
def test_the_4x4_target_averages_each_patch_into_16_cells_of_3_bit_colour():
    pixels = torch.zeros(1, 3, 8, 8)  # one 8x8 patch: cells of 2x2 pixels
    pixels[0, 0, 2:4, 4:6] = 1.0  # cell (row 1, column 2): pure red
    pixels[0, 2, 0, 0] = 1.0  # cell (0, 0): one of four pixels blue, mean 0.25 -> bin 2
    target = downsized_target(pixels, 8)
    expected = [0] * 16
    expected[1 * 4 + 2], expected[0] = 7 * 64, 2
    assert target.shape == (1, 1, 16) and target[0, 0].tolist() == expected


@pytest.mark.unit
def test_the_objective_never_reads_the_labels_and_trains_on_a_one_class_folder(tmp_path):
    write_class_folders(tmp_path / "images", {"unlabelled": 24})
    data = {"source": str(tmp_path / "images"), "batch_size": 8}
    with pytest.raises(ConfigError, match="classification needs at least 2"):
        Trainer(tiny_config(tmp_path / "classify", "demo", model=SMALL, data=data))
    trainer = Trainer(tiny_config(tmp_path / "run", "demo", model=SMALL, data=data, **MPP))
    images, labels = next(iter(trainer.train_loader))
    losses = []
    for given in (labels, torch.full_like(labels, -1)):
        torch.manual_seed(3)  # the same corruption
        losses.append(trainer.objective.loss(trainer.network, images, given, trainer.precision.autocast))
    trainer.close()
    assert trainer.class_names == ["unlabelled"] and trainer.model.config.num_classes == 0
    assert torch.equal(losses[0], losses[1]) and losses[0] > 0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_masked_patch_pretraining_learns_and_its_model_fine_tunes(tmp_path, caplog):
    out = tmp_path / "mpp"
    config = tiny_config(out, "demo", model=SMALL, schedule={"steps": 40, "warmup_steps": 4}, **MPP)
    trainer = Trainer(config)
    before, _ = trainer.objective.evaluate(
        trainer.model, trainer.val_loader, trainer.device, trainer.precision.autocast
    )
    summary = trainer.fit().summary
    assert summary["objective"] == "mpp" and summary["mpp_target"] == "mean-color"
    assert summary["val_loss"] < 0.6 * before["val_loss"], (before, summary)  # ln 512 = 6.2 at the start
    assert summary["val_top1"] > before["val_top1"] + 0.2
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["loss"] < rows[0]["loss"]
    model = load(out)
    assert model.config.num_classes == 0 and not hasattr(model, HEAD)
    checkpoint = torch.load(next((out / "checkpoints").rglob("*.pt")), map_location="cpu", weights_only=False)
    assert any(key.startswith(HEAD) for key in checkpoint["model"])  # a resumed run has its head back

    caplog.set_level(logging.INFO, logger="vitlab")
    flags = ["--data", "digits", "--image-size", "8", "--batch-size", "32", "--steps", "10", "--threads", "1"]
    argv = ["finetune", "--ckpt", str(out), "--out", str(tmp_path / "ft"), *flags]
    assert main([*argv, "--set", "schedule.warmup_steps=2"]) == 0
    assert "new zero-initialised head: 32 x 10 (10 classes), replacing the 0-class head" in caplog.text
    assert load(tmp_path / "ft").config.num_classes == 10


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("target", ["4x4", "l2"])
def test_the_other_targets_learn(tmp_path, target):
    config = tiny_config(tmp_path, "demo", model=SMALL, schedule={"steps": 20, "warmup_steps": 2}, **MPP)
    config.objective.mpp_target = target
    trainer = Trainer(config)
    before, _ = trainer.objective.evaluate(
        trainer.model, trainer.val_loader, trainer.device, trainer.precision.autocast
    )
    summary = trainer.fit().summary
    assert summary["val_loss"] < 0.8 * before["val_loss"] and summary["mpp_target"] == target


@pytest.mark.unit
@pytest.mark.fault("bad-config", kinds=5)
def test_masked_patch_prediction_refuses_what_it_cannot_train(tmp_path, capsys):
    mixing = tiny_config(tmp_path / "a", "small-data", objective={"name": "mpp"})
    with pytest.raises(ConfigError, match=r"^augment\.mixup=.*objective\.name=mpp"):
        mixing.validate()
    bit = config_for("BiT-R26x1-small", image_size=8)
    with pytest.raises(ConfigError, match="^objective.name=mpp: needs a ViT .* not a BiT ResNet"):
        Trainer(tiny_config(tmp_path / "b", "demo", **MPP), architecture=bit)
    six = tiny_config(tmp_path / "c", "demo", model={"variant": "mu/4", "image_size": 12}, **MPP)
    six.model.variant, six.objective.mpp_target = "mu/6", "4x4"
    with pytest.raises(ConfigError, match="^objective.mpp_target=4x4: patch size 6 is not divisible"):
        Trainer(six)
    line = one_line_error(
        capsys,
        [
            "train",
            "--recipe",
            "demo",
            "--objective",
            "mpp",
            "--set",
            "augment.label_smoothing=0",
            "--out",
            str(tmp_path / "d"),
            "--keep-best-by",
            "val_top1",
        ],
    )
    assert "run.keep_best_by" in line
    with pytest.raises(SystemExit):  # the choices come from the Literal
        main(["train", "--objective", "mpp", "--mpp-target", "8x8", "--out", str(tmp_path / "e")])
