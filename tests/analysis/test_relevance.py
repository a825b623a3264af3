"""Class-specific relevance (Chefer et al. 2021): the rule on numbers worked out by hand, and a real
model whose maps change with the class they explain."""

from __future__ import annotations

import pytest
import torch

from helpers import randomise_
from vitlab.analysis import class_relevance, relevance_rule
from vitlab.model import create_untrained

pytestmark = pytest.mark.unit

# One layer, two heads, three tokens (token 0 the class token).
A = torch.tensor(
    [
        [[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]],
        [[0.4, 0.4, 0.2], [0.3, 0.3, 0.4], [0.5, 0.25, 0.25]],
    ]
)[None]
GRAD = torch.tensor(
    [
        [[1.0, -2.0, 0.5], [0.0, 1.0, -1.0], [2.0, 0.0, 1.0]],
        [[-1.0, 1.0, 2.0], [1.0, 0.0, 0.5], [-2.0, 4.0, 0.0]],
    ]
)[None]
# grad * A, head 0: [[.5 -.6 .1] [0 .6 -.3] [.4 0 .6]];  head 1: [[-.4 .4 .4] [.3 0 .2] [-1 1 0]].
# Negative parts cut, mean over heads: A_bar = [[.25 .2 .25] [.15 .3 .1] [.2 .5 .3]]; R = I + A_bar.
R1 = torch.tensor([[1.25, 0.2, 0.25], [0.15, 1.3, 0.1], [0.2, 0.5, 1.3]])


def test_one_layer_rule_by_hand():
    torch.testing.assert_close(relevance_rule([A], [GRAD])[0], R1)


def test_layers_compose_last_on_the_left():
    # A second layer with one head, gradient 1 everywhere: A_bar = A2 and R = (I + A2) R1, so
    # row 0 = R1[0] + R1[1], rows 1, 2 = 2 R1[1], 2 R1[2]. (The other order gives row 0 = 1.25 1.65 .5.)
    A2 = torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])[None, None]
    expected = torch.tensor([[1.4, 1.5, 0.35], [0.3, 2.6, 0.2], [0.4, 1.0, 2.6]])
    torch.testing.assert_close(relevance_rule([A, A2], [GRAD, torch.ones_like(A2)])[0], expected)


def tiny(**overrides):
    options = {"image_size": 16, "depth": 2, "dim": 32, "num_heads": 2, "mlp_dim": 64, "num_classes": 5}
    options.update(overrides)
    return randomise_(create_untrained("Ti/4", **options)).eval()


def test_maps_depend_on_the_class_and_come_from_the_prediction_pass():
    model = tiny()
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    first, second = class_relevance(model, images, target=0), class_relevance(model, images, target=[1, 1])
    assert first.maps.shape == (2, 4, 4) and first.relevance.shape == (2, 17, 17)
    assert first.target.tolist() == [0, 0] and second.target.tolist() == [1, 1]
    with torch.no_grad():
        torch.testing.assert_close(first.logits, model(images), rtol=1e-5, atol=1e-5)
    # The class token's row of R, patch columns; non-negative, not flat, and not the same for both classes.
    torch.testing.assert_close(first.maps, first.relevance[:, 0, 1:].reshape(2, 4, 4))
    assert first.maps.min() >= 0 and first.maps.std() > 1e-4
    difference = (first.maps - second.maps).abs().amax(dim=(1, 2))
    assert (difference > 0.1 * first.maps.amax(dim=(1, 2))).all()
    # The default explains each image's prediction; no parameter was given a gradient.
    predicted = class_relevance(model, images)
    assert predicted.target.tolist() == first.logits.argmax(-1).tolist()
    for k in range(2):
        own = class_relevance(model, images[k : k + 1], target=int(predicted.target[k]))
        torch.testing.assert_close(predicted.maps[k], own.maps[0], rtol=1e-4, atol=1e-6)
    assert all(p.grad is None for p in model.parameters())


def test_gap_model_averages_the_patch_rows():
    model = tiny(pool="gap")
    relevance = class_relevance(model, torch.randn(1, 3, 16, 16), target=3)
    torch.testing.assert_close(relevance.maps[0], relevance.relevance[0].mean(dim=0).reshape(4, 4))


@pytest.mark.fault("bad-input", kinds=5)
def test_bad_targets_and_inputs_are_refused():
    model = tiny()
    images = torch.randn(2, 3, 16, 16)
    with pytest.raises(ValueError, match="class 5 is out of range for a model with 5 classes"):
        class_relevance(model, images, target=5)
    with pytest.raises(ValueError, match="3 target classes for 2 images"):
        class_relevance(model, images, target=[0, 1, 2])
    with pytest.raises(ValueError, match="class relevance needs a classifier"):
        class_relevance(tiny(num_classes=0), images)
    with pytest.raises(ValueError, match="one gradient per attention layer, got 1 and 0"):
        relevance_rule([A], [])
    with pytest.raises(ValueError, match="differ in shape"):
        relevance_rule([A], [GRAD[:, :1]])
