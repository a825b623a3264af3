"""A module name used in two packages of vitlab names one idea in both (STYLE.md: one name per idea):
BiT's model and the conversion of BiT's weights, say, not image folders and checkpoint folders. The
names shared for one idea are listed with what it is; any other shared name fails, and so does a
listed name that is no longer shared, so that the lists stay true."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "vitlab"

# module name -> the one idea it names in every package that has it
ONE_IDEA = {
    "axial.py": "Axial-ViT: the model, its experiment, its attention analysis",
    "bit.py": "BiT ResNet: the model and its weights",
    "hybrid.py": "the ResNet + ViT hybrid: the model and its weights",
    "config.py": "the typed config of the package's own object (model, training run)",
    "plots.py": "the package's figures",
    "report.py": "the package's report document",
    "document.py": "the package's generated document",
    "posemb.py": "position embeddings: their experiment and their analysis",
    "predict.py": "prediction for images: the command and the library call",
    "push.py": "uploading to the Hugging Face Hub: a model, a run, the command",
    "stream.py": "image files streamed in order: their loading and their prediction",
}

# shared for different ideas, not yet renamed: module name -> its packages' ideas
NOT_YET_RENAMED: dict[str, str] = {}


def shared_names() -> dict[str, list[str]]:
    """Each module name (not __init__ or __main__) found in more than one package, with its paths."""
    paths = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name not in ("__init__.py", "__main__.py"):
            paths[path.name].append(path.relative_to(PACKAGE).as_posix())
    return {name: where for name, where in paths.items() if len(where) > 1}


def test_a_shared_module_name_names_one_idea():
    shared = shared_names()
    unlisted = {name: where for name, where in shared.items() if name not in ONE_IDEA | NOT_YET_RENAMED}
    assert not unlisted, f"module names in two packages: rename one, or list the one idea they name: {unlisted}"
    stale = sorted((set(ONE_IDEA) | set(NOT_YET_RENAMED)) - set(shared))
    assert not stale, f"no longer shared: take them off the lists: {stale}"
