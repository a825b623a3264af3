"""Few-shot linear evaluation and the linear probe: closed form against a direct solve, known data."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from helpers import randomise_
from vitlab.evaluate import extract_features, fewshot_accuracy, fit_least_squares, linear_probe
from vitlab.evaluate.fewshot import BIAS_CONSTANT, sample_shots
from vitlab.model import create_untrained

pytestmark = pytest.mark.unit


def clusters(per_class: int, num_classes: int = 4, dim: int = 16, spread: float = 0.3, seed: int = 0):
    """Gaussian blobs around far-apart centres: linearly separable."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(num_classes, dim)) * 5
    labels = np.repeat(np.arange(num_classes), per_class)
    return centres[labels] + spread * rng.normal(size=(len(labels), dim)), labels


def direct_ridge(features: np.ndarray, labels: np.ndarray, num_classes: int, l2: float) -> np.ndarray:
    """The same problem written out as one least-squares system and handed to lstsq."""
    standard = (features - features.mean(0)) / (features.std(0) + 1e-5)
    x = np.hstack([standard, np.full((len(features), 1), BIAS_CONSTANT)])
    y = -np.ones((len(labels), num_classes))
    y[np.arange(len(labels)), labels] = 1.0
    # min |X W - Y|^2 + l2 |W|^2  ==  min |[X; sqrt(l2) I] W - [Y; 0]|^2
    a = np.vstack([x, np.sqrt(l2) * np.eye(x.shape[1])])
    b = np.vstack([y, np.zeros((x.shape[1], num_classes))])
    return np.linalg.lstsq(a, b, rcond=None)[0]


@pytest.mark.parametrize("samples,dim", [(60, 8), (12, 50)])  # primal (N >= D) and dual (N < D) forms
@pytest.mark.parametrize("l2", [2.0**10, 1e-2])
def test_closed_form_matches_direct_least_squares(samples, dim, l2):
    rng = np.random.default_rng(1)
    features = rng.normal(size=(samples, dim)) * rng.uniform(0.1, 10, size=dim) + 3
    labels = rng.integers(0, 3, size=samples)
    classifier = fit_least_squares(features, labels, 3, l2)
    np.testing.assert_allclose(classifier.weight, direct_ridge(features, labels, 3, l2), rtol=1e-6, atol=1e-9)


def test_separable_features_are_classified_perfectly():
    train_x, train_y = clusters(per_class=30)
    test_x, test_y = clusters(per_class=50, seed=0)
    test_x = test_x + np.random.default_rng(9).normal(size=test_x.shape) * 0.3
    result = fewshot_accuracy(train_x, train_y, test_x, test_y, shots=(1, 5, 25), seeds=3)
    for shots in (1, 5, 25):
        assert result.accuracy[shots] == [1.0, 1.0, 1.0]
    # On the training points themselves too, with almost no regularisation.
    classifier = fit_least_squares(train_x, train_y, 4, l2=1e-6)
    assert np.all(classifier.predict(train_x) == train_y)


def test_uninformative_features_score_near_chance():
    rng = np.random.default_rng(3)
    train_y, test_y = np.repeat(np.arange(5), 40), np.repeat(np.arange(5), 200)
    result = fewshot_accuracy(
        rng.normal(size=(200, 16)), train_y, rng.normal(size=(1000, 16)), test_y, shots=(10,), seeds=3
    )
    assert abs(result.mean(10) - 0.2) < 0.06


def test_shots_are_drawn_per_class_nested_and_seeded():
    labels = np.repeat(np.arange(3), 30)
    five = sample_shots(labels, 5, seed=0, num_classes=3)
    assert np.bincount(labels[five]).tolist() == [5, 5, 5]
    one = sample_shots(labels, 1, seed=0, num_classes=3)
    assert set(one) <= set(five)  # a seed's 1-shot set is part of its 5-shot set (as big_vision)
    assert not np.array_equal(five, sample_shots(labels, 5, seed=1, num_classes=3))
    np.testing.assert_array_equal(five, sample_shots(labels, 5, seed=0, num_classes=3))
    with pytest.raises(ValueError, match="class 2 has 6 training examples, fewer than 7 shots"):
        sample_shots(labels[:66], 7, seed=0, num_classes=3)


def test_result_reports_every_seed():
    x, y = clusters(per_class=10)
    result = fewshot_accuracy(x, y, x, y, shots=(1, 5), seeds=4).to_dict()
    assert result["seeds"] == 4 and result["l2"] == 1024.0
    assert set(result["shots"]) == {"1", "5"} and len(result["shots"]["5"]["per_seed"]) == 4
    with pytest.raises(ValueError, match="l2 must be positive"):
        fit_least_squares(x, y, 4, l2=0)


def test_linear_probe_on_separable_and_single_class_data():
    train_x, train_y = clusters(per_class=30)
    test_x, test_y = clusters(per_class=20, seed=0)
    result = linear_probe(train_x, train_y, test_x, test_y)
    assert result.accuracy == 1.0 and result.train_accuracy == 1.0
    assert (result.train_samples, result.test_samples) == (120, 80)
    with pytest.raises(ValueError, match="at least two classes"):
        linear_probe(train_x[:30], train_y[:30], test_x, test_y)


@pytest.mark.parametrize("representation_size", [None, 24])
def test_features_are_the_pre_logits_representation(representation_size):
    model = randomise_(
        create_untrained(
            "Ti/4",
            image_size=8,
            depth=1,
            dim=32,
            num_heads=2,
            mlp_dim=32,
            num_classes=3,
            representation_size=representation_size,
        )
    ).eval()
    images, labels = torch.randn(5, 3, 8, 8), torch.tensor([0, 1, 2, 1, 0])
    features, got_labels = extract_features(model, [(images[:3], labels[:3]), (images[3:], labels[3:])])
    assert features.shape == (5, representation_size or 32)
    with torch.no_grad():
        expected = model.forward_head(model.forward_features(images), pre_logits=True)
        # The classifier reads exactly these features.
        torch.testing.assert_close(model.head(torch.from_numpy(features)), model(images), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(features, expected.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got_labels, labels.numpy())


@pytest.mark.fault("bad-input", kinds=1)
def test_too_few_examples_for_the_shots_are_refused_before_any_feature_is_extracted(tmp_path, capsys, monkeypatch):
    from PIL import Image

    from helpers import one_line_error

    probe_module = importlib.import_module("vitlab.evaluate.linear_probe")  # the package names a function so

    randomise_(create_untrained("Ti/4", image_size=16, depth=1, dim=16, num_heads=2, mlp_dim=32)).save_pretrained(
        tmp_path / "model"
    )
    rng = np.random.default_rng(0)
    for name, count in (("cat", 12), ("dog", 4), ("eel", 3)):
        (tmp_path / "data" / name).mkdir(parents=True)
        for index in range(count):
            image = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
            Image.fromarray(image).save(tmp_path / "data" / name / f"{index}.png")

    def never(*args, **kwargs):
        raise AssertionError("features extracted before the shots were checked")

    monkeypatch.setattr(probe_module, "extract_features", never)
    argv = ["fewshot", "--ckpt", str(tmp_path / "model"), "--data", str(tmp_path / "data"), "--shots", "1,5"]
    line = one_line_error(capsys, [*argv, "--device", "cpu"])
    assert "class 1 ('dog') has " in line and "training examples, fewer than 5 shots; 1 more classes have fewer" in line
