"""Calibration: how far a classifier's confidence is from its accuracy.

Expected calibration error as Guo et al., "On Calibration of Modern Neural Networks" (ICML 2017,
Sec. 2): the confidence of a prediction is its top softmax probability; predictions fall into
M = 15 equal-width bins B_m = ((m - 1) / M, m / M] of confidence, and

    ECE = sum_m |B_m| / n * |acc(B_m) - conf(B_m)|

where acc and conf are a bin's accuracy and mean confidence. Empty bins add nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ECE_BINS = 15  # Guo et al. 2017


@dataclass
class Calibration:
    ece: float
    bins: int
    counts: list[int]  # images per bin, lowest confidence first
    accuracy: list[float | None]  # per bin; None where the bin is empty
    confidence: list[float | None]

    def to_dict(self) -> dict:
        return {
            "ece": self.ece,
            "bins": self.bins,
            "counts": self.counts,
            "accuracy": self.accuracy,
            "confidence": self.confidence,
        }


def calibration(confidence: np.ndarray, correct: np.ndarray, bins: int = ECE_BINS) -> Calibration:
    """ECE and the reliability diagram's bins of top-1 `confidence` (N,) in (0, 1] and `correct` (N,)."""
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    if confidence.shape != correct.shape or confidence.ndim != 1 or len(confidence) == 0:
        raise ValueError(
            f"calibration needs as many confidences as outcomes, one each; got shapes "
            f"{confidence.shape} and {correct.shape}"
        )
    if bins < 1:
        raise ValueError(f"calibration needs at least one bin, got {bins}")
    if confidence.min() < 0.0 or confidence.max() > 1.0:
        raise ValueError(f"confidences must lie in [0, 1], got {confidence.min()}..{confidence.max()}")
    # Bin m (0-based) holds (m / M, (m + 1) / M]; a confidence of exactly 0 joins the first.
    edges = np.linspace(0.0, 1.0, bins + 1)
    index = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, bins - 1)
    counts = np.bincount(index, minlength=bins)
    hits = np.bincount(index, weights=correct.astype(np.float64), minlength=bins)
    sure = np.bincount(index, weights=confidence, minlength=bins)
    filled = counts > 0
    accuracy = np.where(filled, hits / np.maximum(counts, 1), 0.0)
    mean_confidence = np.where(filled, sure / np.maximum(counts, 1), 0.0)
    ece = float(np.sum(counts / len(confidence) * np.abs(accuracy - mean_confidence)))
    return Calibration(
        ece=ece,
        bins=bins,
        counts=counts.tolist(),
        accuracy=[float(a) if f else None for a, f in zip(accuracy, filled)],
        confidence=[float(c) if f else None for c, f in zip(mean_confidence, filled)],
    )
