"""Each RandAugment operation timed on one crop, vitlab's (data/randaugment.py) beside timm's AugmentOp."""

from __future__ import annotations

import random
import time

from PIL import Image

from vitlab.data.randaugment import FILL, OPERATIONS, RandAugment
from vitlab.data.transforms import PIL_INTERPOLATIONS


def op_times(image: Image.Image, magnitude: int, interpolation: str, repeats: int = 15) -> dict[str, dict[str, float]]:
    """{operation: {"vitlab": ms, "timm": ms}}, the fastest of `repeats` calls each (the one a busy machine
    disturbed least), interleaved; the operation always applied (probability 1), at `magnitude`, with a
    random sign as both draw it."""
    from timm.data.auto_augment import AugmentOp

    resample = PIL_INTERPOLATIONS[interpolation]
    hparams = {"img_mean": FILL, "interpolation": resample, "translate_const": int(min(image.size) * 0.45)}
    mine = RandAugment(1, magnitude, prob=1.0, interpolation=resample)
    times: dict[str, dict[str, float]] = {}
    for name, operation in OPERATIONS.items():
        theirs = AugmentOp(name, prob=1.0, magnitude=magnitude, hparams=hparams)
        level = mine.strength(name)

        def vitlab_call(operation=operation, level=level) -> None:
            signed = -level if operation.signed and level is not None and random.random() < 0.5 else level
            operation.apply(image, signed, resample, FILL)

        seconds: dict[str, list[float]] = {"vitlab": [], "timm": []}
        for _ in range(repeats):
            for side, call in (("vitlab", vitlab_call), ("timm", lambda theirs=theirs: theirs(image))):
                start = time.perf_counter()
                call()
                seconds[side].append(time.perf_counter() - start)
        times[name] = {side: 1e3 * min(values) for side, values in seconds.items()}
    return times
