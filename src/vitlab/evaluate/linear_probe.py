"""Linear probe: a logistic-regression classifier on all the frozen pre-logits training features.

Where few-shot evaluation asks how good the representation is from a handful of labels, the
probe asks how linearly separable the classes are given every label. Features are standardised
(as for few-shot) and the classifier is scikit-learn's multinomial LogisticRegression.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from vitlab.model import BiTResNet, VisionTransformer

from .fewshot import L2_REG, NUM_SEEDS, SHOTS, check_shots, extract_features, fewshot_accuracy


@dataclass
class LinearProbeResult:
    accuracy: float  # top-1 on the test features
    train_accuracy: float
    C: float  # inverse regularisation strength of the logistic regression
    train_samples: int
    test_samples: int


def linear_probe(
    train_features: np.ndarray,
    train_labels: np.ndarray,
    test_features: np.ndarray,
    test_labels: np.ndarray,
    C: float = 1.0,
    max_iter: int = 2000,
) -> LinearProbeResult:
    """Fit on all training features, report top-1 accuracy on the test features."""
    if len(np.unique(train_labels)) < 2:
        raise ValueError("a linear probe needs training examples of at least two classes")
    probe = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=max_iter))
    probe.fit(train_features, train_labels)
    return LinearProbeResult(
        accuracy=float(probe.score(test_features, test_labels)),
        train_accuracy=float(probe.score(train_features, train_labels)),
        C=C,
        train_samples=len(train_labels),
        test_samples=len(test_labels),
    )


def evaluate_representation(
    model: VisionTransformer | BiTResNet,
    train_data: torch.utils.data.Dataset,
    test_data: torch.utils.data.Dataset,
    shots: Sequence[int] = SHOTS,
    l2: float = L2_REG,
    seeds: int = NUM_SEEDS,
    probe: bool = True,
    batch_size: int = 128,
    num_workers: int = 0,
    device: torch.device | str | None = None,
    num_classes: int | None = None,
    class_names: Sequence[str] | None = None,
) -> dict:
    """Few-shot accuracy (and, with `probe`, the full linear probe) of the model's pre-logits features.

    The datasets yield (image tensor, label) with the evaluation transform (no augmentation). A
    training set with `labels` (every vitlab source) too small for `shots` is refused before its
    features are extracted.
    """
    labels = getattr(train_data, "labels", None)
    if labels is not None and len(labels):
        check_shots(labels, shots, num_classes or max(labels) + 1, class_names)

    def features(data: torch.utils.data.Dataset) -> tuple[np.ndarray, np.ndarray]:
        loader = torch.utils.data.DataLoader(data, batch_size=batch_size, num_workers=num_workers)
        return extract_features(model, loader, device)

    train_x, train_y = features(train_data)
    test_x, test_y = features(test_data)
    result = {
        "feature_dim": int(train_x.shape[1]),
        "fewshot": fewshot_accuracy(train_x, train_y, test_x, test_y, shots, l2, seeds, num_classes).to_dict(),
    }
    if probe:
        result["linear_probe"] = asdict(linear_probe(train_x, train_y, test_x, test_y))
    return result
