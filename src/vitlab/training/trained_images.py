"""Which of the images an evaluation scores a run trained on (`vitlab eval` on a run folder).

By their bytes where the run recorded its training images' digests as it started (DIR/train_digests.npy,
vitlab.data.content): a training image is then found under any path, in a copy of the folder with
images added, renamed, or after the folder changed in place. A run from before that is checked by
path. A training split listed otherwise than the run's summary.json records (train_split) is a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from vitlab.data.content import count_among, read_digests
from vitlab.data.datasets import LabelledImages
from vitlab.textfiles import read_json

from .outputs import DIGESTS_FILE, SUMMARY_FILE

log = logging.getLogger("vitlab")


def trained_images_scored(
    folder: Path, source: str, scored: Sequence[LabelledImages], train: LabelledImages | None
) -> tuple[int | None, str | None]:
    """(how many images of `scored` the run in `folder` trained on, "content" or "path": how they were
    found). `train` is the run's training split as its data `source` lists it now (None: it cannot be
    listed); (None, None) where neither the digests nor the listing can tell."""
    recorded = folder / DIGESTS_FILE
    by_content = recorded.is_file()
    if train is not None:
        _warn_if_changed(folder, source, train, by_content)
    if by_content:
        try:
            return count_among(scored, read_digests(recorded)), "content"
        except (OSError, ValueError) as error:
            log.warning("cannot read %s (%s); the scored images are checked by path instead", recorded, error)
    if train is None:
        return None, None
    keys = set(train.sample_keys())
    return sum(key in keys for part in scored for key in part.sample_keys()), "path"


def _warn_if_changed(folder: Path, source: str, train: LabelledImages, by_content: bool) -> None:
    then = read_summary(folder).get("train_split")
    now = train.fingerprint()
    if then and then != now:
        log.warning(
            "%s has changed since the run trained on it (%s then, %s now): %s",
            source,
            then,
            now,
            "the scored images are checked against its training images by their bytes"
            if by_content
            else "the images it trained on cannot be told apart, and scored images may be among them",
        )


def read_summary(folder: Path) -> dict:
    """The run's summary.json ({} where there is none, or it cannot be read)."""
    try:
        summary = read_json(folder / SUMMARY_FILE)
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}
