"""eval's gallery of misclassified images: the mistakes a model is surest of, with their files."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from .plots import plot_gallery

GALLERY_PNG = "misclassified.png"
GALLERY_SIZE = 16


def write_gallery(parts, skipped, predictions, names: Sequence[str], folder: Path) -> str:
    """misclassified.png: the GALLERY_SIZE surest mistakes, each captioned with its file, true class,
    predicted class and confidence; the name written."""
    gaps = {index for index, _, _ in skipped}
    scored = [(part, i) for part in parts for i in range(len(part))]
    scored = [item for index, item in enumerate(scored) if index not in gaps]
    labels, predicted, confidence = predictions.arrays()
    wrong = [int(i) for i in (labels != predicted).nonzero()[0]]
    wrong.sort(key=lambda i: -confidence[i])
    shown = []
    for i in wrong[:GALLERY_SIZE]:
        part, index = scored[i]
        image = picture(part.subset([index], None)[0][0])
        key = Path(part.sample_keys()[index]).name
        caption = f"{key}\ntrue {names[labels[i]]}, said {names[predicted[i]]} ({confidence[i]:.2f})"
        shown.append((image, caption))
    title = f"{len(wrong)} of {len(labels)} misclassified" + (
        f"; the {len(shown)} surest" if len(wrong) > len(shown) else ""
    )
    plot_gallery(shown, folder / GALLERY_PNG, title)
    return GALLERY_PNG


def picture(image) -> Image.Image:
    """An image as its source reads it (PIL's, or an array), as PIL's."""
    return image if isinstance(image, Image.Image) else Image.fromarray(np.asarray(image))
