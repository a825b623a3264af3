"""`digits`: scikit-learn's bundled 8x8 handwritten digits (1797 images, 10 classes; no download).

The split is fixed (stratified 80/20, seed 0, whatever the run's seed) so that every run is
validated on the same 360 images.
"""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits
from sklearn.utils import Bunch

from .datasets import ArrayImages, Transform
from .splits import DataSplits, split_indices

VAL_FRACTION = 0.2
SPLIT_SEED = 0


def digits_images() -> tuple[np.ndarray, np.ndarray]:
    """All digits as uint8 RGB (1797, 8, 8, 3) and labels (1797,)."""
    bunch = load_digits()
    assert isinstance(bunch, Bunch)  # the stubs' return type also lists the return_X_y=True tuples
    # Pixel values are ink counts 0..16; spread them over 0..255 and replicate grey into RGB.
    grey = np.rint(bunch.images * (255.0 / 16.0)).astype(np.uint8)
    return np.repeat(grey[..., None], 3, axis=-1), bunch.target.astype(np.int64)


def load_digits_splits(train_transform: Transform, eval_transform: Transform) -> DataSplits:
    images, labels = digits_images()
    train_idx, val_idx = split_indices(labels, VAL_FRACTION, SPLIT_SEED)
    full = ArrayImages(images, labels)
    return DataSplits(
        train=full.subset(train_idx, train_transform),
        val=full.subset(val_idx, eval_transform),
        class_names=[str(d) for d in range(10)],
    )
