"""Development splits held out of the training split (paper Appendix B.1.1; Keras' validation_split), the
test split evaluated at the end, and the best-by-validation weights kept (Keras' save_best_only)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from helpers import tiny_config
from vitlab.data import hold_out
from vitlab.data.datasets import ArrayImages
from vitlab.training import Trainer
from vitlab.training.best import BestModel


def tagged(n: int, classes: int = 4) -> ArrayImages:
    """n images whose first pixel is their index, labels cycling over `classes`."""
    images = np.zeros((n, 2, 2, 3), np.uint8)
    images[:, 0, 0, 0] = np.arange(n)
    return ArrayImages(images, [i % classes for i in range(n)])


def indices(dataset: ArrayImages) -> list[int]:
    return dataset.images[:, 0, 0, 0].tolist()


@pytest.mark.unit
def test_last_takes_the_last_images_as_keras_validation_split():
    rest, held = hold_out(tagged(95), 0.1, seed=0, how="last")
    assert indices(rest) == list(range(85)) and indices(held) == list(range(85, 95))  # floor(95 * 0.9) = 85


@pytest.mark.unit
def test_stratified_is_class_balanced_seeded_and_disjoint():
    rest, held = hold_out(tagged(200), 0.1, seed=1)
    assert np.bincount(held.labels).tolist() == [5, 5, 5, 5]
    assert not set(indices(rest)) & set(indices(held)) and len(rest) + len(held) == 200
    assert indices(hold_out(tagged(200), 0.1, seed=2)[1]) != indices(held)


@pytest.mark.unit
@pytest.mark.fault("bad-config", kinds=2)
def test_bad_dev_fractions_are_refused():
    with pytest.raises(ValueError, match="dev fraction"):
        hold_out(tagged(10), 1.0, seed=0)
    with pytest.raises(ValueError, match="empty split"):
        hold_out(tagged(1), 0.1, seed=0, how="last")


@pytest.mark.unit
def test_best_weights_keep_the_first_strictly_best():
    best, model = BestModel("unused", keep=True), torch.nn.Linear(2, 1)
    kept = {}
    for step, top1 in [(1, 0.5), (2, 0.4), (3, 0.5), (4, 0.3)]:
        torch.nn.init.constant_(model.weight, float(step))
        if best.update(step, top1, model):
            kept[step] = model.weight.detach().clone()
    assert list(kept) == [1] and best.step == 1
    best.restore(model)
    assert torch.equal(model.weight, torch.full((1, 2), 1.0))


@pytest.mark.integration
def test_a_run_validates_on_the_dev_split_keeps_the_best_and_reports_the_test_split(tmp_path):
    config = tiny_config(
        tmp_path / "run",
        "demo",
        data={"dev_fraction": 0.1, "dev_split": "last"},
        run={"keep_best": True, "eval_every": 5},
        schedule={"steps": 20, "warmup_steps": 5},
    )
    trainer = Trainer(config)
    train_total = 1437  # digits: 1797 images, 360 of them its fixed validation split
    assert len(trainer.val_loader.dataset) == train_total - int(np.floor(train_total * 0.9))
    assert len(trainer.test_loader.dataset) == 360
    summary = trainer.fit().summary
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    vals = [row["val_top1"] for row in rows]
    assert summary["val_top1"] == max(vals) and summary["best_step"] == rows[vals.index(max(vals))]["step"]
    assert summary["test_images"] == 360 and summary["dev_images"] == 144 and 0.0 < summary["test_top1"] <= 1.0


@pytest.mark.unit
def test_best_weights_survive_a_checkpoint_round_trip():
    best, model = BestModel("unused", keep=True), torch.nn.Linear(2, 1)
    best.update(7, 0.9, model)
    restored = BestModel("unused", keep=True)
    restored.load_state_dict(best.state_dict())
    assert (restored.step, restored.value) == (7, 0.9) and not restored.update(8, 0.9, model)
    torch.testing.assert_close(restored.weights["weight"], model.weight.detach())
