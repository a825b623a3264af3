"""Few-shot linear evaluation (paper Sec. 4.1, "Metrics"), as big_vision's fewshot_lsr evaluator.

The representation is frozen: the pre-logits features of the model. For k shots per class, a
linear map is fitted in closed form by L2-regularised least squares onto {-1, 1}^K targets
(one-hot rescaled) and scored by top-1 accuracy on a held-out set. As big_vision does:

- features are standardised per dimension with the mean and std of the k-shot training set;
- the bias is a constant feature of 100 appended to each input, so the penalty on its weight is
  10^4 times weaker than on the others ("almost unregularised");
- the penalty is l2 = 2^10, shots are 1, 5, 10 and 25, and each result averages 3 seeded draws;
  for seed s the examples of each class are shuffled by numpy's default_rng(s) and the first k taken,
  so the 1-shot set of a seed is part of its 5-shot set.
"""

from __future__ import annotations

from collections.abc import Sequence, Sized
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
import torch

from vitlab.model import BiTResNet, VisionTransformer
from vitlab.progress import progress

L2_REG = 2.0**10
SHOTS = (1, 5, 10, 25)
NUM_SEEDS = 3
BIAS_CONSTANT = 100.0
STD_EPS = 1e-5


@torch.no_grad()
def extract_features(
    model: VisionTransformer | BiTResNet, batches, device: torch.device | str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Frozen pre-logits features (N, F) and labels (N,) for an iterable of (images, labels) batches."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.eval()
    features, labels = [], []
    total = len(batches) if isinstance(batches, Sized) else None
    for images, targets in progress(batches, "features", total=total):
        tokens = model.forward_features(images.to(device))
        features.append(model.forward_head(tokens, pre_logits=True).float().cpu().numpy())
        labels.append(np.asarray(targets, dtype=np.int64))
    if not features:
        raise ValueError("no images to extract features from: the dataset is empty")
    return np.concatenate(features), np.concatenate(labels)


@dataclass
class LeastSquaresClassifier:
    """A linear classifier on standardised features plus a constant bias feature."""

    mean: np.ndarray  # (F,) of the training features
    std: np.ndarray  # (F,), plus STD_EPS
    weight: np.ndarray  # (F + 1, K); the last row multiplies BIAS_CONSTANT

    @staticmethod
    def design(features: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
        """(N, F) -> (N, F + 1): standardised features with the bias constant appended."""
        standard = (np.asarray(features, dtype=np.float64) - mean) / std
        return np.pad(standard, ((0, 0), (0, 1)), constant_values=BIAS_CONSTANT)

    def decision_function(self, features: np.ndarray) -> np.ndarray:
        return self.design(features, self.mean, self.std) @ self.weight  # (N, K)

    def predict(self, features: np.ndarray) -> np.ndarray:
        return self.decision_function(features).argmax(axis=1)


def fit_least_squares(
    features: np.ndarray, labels: np.ndarray, num_classes: int, l2: float = L2_REG
) -> LeastSquaresClassifier:
    """argmin_W |X W - Y|^2 + l2 |W|^2 with Y = 2 onehot(labels) - 1, in closed form."""
    if l2 <= 0:
        raise ValueError(f"l2 must be positive, got {l2}")
    features = np.asarray(features, dtype=np.float64)
    mean = features.mean(axis=0)
    std = features.std(axis=0) + STD_EPS
    x = LeastSquaresClassifier.design(features, mean, std)  # (N, D)
    y = 2.0 * np.eye(num_classes)[np.asarray(labels)] - 1.0  # (N, K) in {-1, 1}
    n, d = x.shape
    # The normal equations in whichever space is smaller: (X^T X + l2 I)^-1 X^T Y when N >= D,
    # else X^T (X X^T + l2 I)^-1 Y; both are the same ridge solution.
    if n >= d:
        weight = scipy.linalg.solve(x.T @ x + l2 * np.eye(d), x.T @ y, assume_a="pos")
    else:
        weight = x.T @ scipy.linalg.solve(x @ x.T + l2 * np.eye(n), y, assume_a="pos")
    return LeastSquaresClassifier(mean=mean, std=std, weight=weight)


def check_shots(
    labels: Sequence[int] | np.ndarray, shots: Sequence[int], num_classes: int, class_names: Sequence[str] | None = None
) -> None:
    """Every class has at least max(shots) training examples; from the labels alone, so that a
    dataset too small is refused before any feature is extracted."""
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes)
    most = max(shots)
    short = np.flatnonzero(counts < most)
    if len(short):
        cls = int(short[0])
        name = f"class {cls}" + (f" ({class_names[cls]!r})" if class_names is not None else "")
        others = f"; {len(short) - 1} more classes have fewer too" if len(short) > 1 else ""
        raise ValueError(f"{name} has {counts[cls]} training examples, fewer than {most} shots{others}")


def sample_shots(labels: np.ndarray, shots: int, seed: int, num_classes: int) -> np.ndarray:
    """Indices of `shots` examples of every class, drawn with numpy's default_rng(seed)."""
    check_shots(labels, [shots], num_classes)
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.permutation(np.flatnonzero(labels == cls))[:shots] for cls in range(num_classes)])


@dataclass
class FewShotResult:
    """Held-out top-1 accuracy per number of shots, one value per seed."""

    l2: float
    accuracy: dict[int, list[float]] = field(default_factory=dict)

    def mean(self, shots: int) -> float:
        return float(np.mean(self.accuracy[shots]))

    def to_dict(self) -> dict:
        return {
            "l2": self.l2,
            "seeds": len(next(iter(self.accuracy.values()), [])),
            "shots": {
                str(k): {"mean": self.mean(k), "std": float(np.std(v)), "per_seed": v} for k, v in self.accuracy.items()
            },
        }


def fewshot_accuracy(
    train_features: np.ndarray,
    train_labels: np.ndarray,
    test_features: np.ndarray,
    test_labels: np.ndarray,
    shots: Sequence[int] = SHOTS,
    l2: float = L2_REG,
    seeds: int = NUM_SEEDS,
    num_classes: int | None = None,
) -> FewShotResult:
    """k-shot linear accuracy on the test set for every k in `shots`, over seeds 0 .. seeds-1."""
    train_labels = np.asarray(train_labels)
    test_labels = np.asarray(test_labels)
    if num_classes is None:
        num_classes = int(max(train_labels.max(), test_labels.max())) + 1
    if seeds < 1:
        raise ValueError(f"seeds must be at least 1, got {seeds}")
    result = FewShotResult(l2=float(l2))
    for k in shots:
        if k < 1:
            raise ValueError(f"shots must be positive, got {k}")
        per_seed = []
        for seed in range(seeds):
            index = sample_shots(train_labels, k, seed, num_classes)
            classifier = fit_least_squares(train_features[index], train_labels[index], num_classes, l2)
            per_seed.append(float(np.mean(classifier.predict(test_features) == test_labels)))
        result.accuracy[int(k)] = per_seed
    return result
