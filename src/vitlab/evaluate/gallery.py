"""eval's gallery of misclassified images: the mistakes a model is surest of, with their files."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

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
        with Image.open(io.BytesIO(part.content(index))) as image:
            image.load()
            key = Path(part.sample_keys()[index]).name
            shown.append(
                (image.copy(), f"{key}\ntrue {names[labels[i]]}, said {names[predicted[i]]} ({confidence[i]:.2f})")
            )
    title = f"{len(wrong)} of {len(labels)} misclassified" + (
        f"; the {len(shown)} surest" if len(wrong) > len(shown) else ""
    )
    plot_gallery(shown, folder / GALLERY_PNG, title)
    return GALLERY_PNG
