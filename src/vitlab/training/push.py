"""`vitlab.push_to_hub(RUN or model, "ORG/NAME")` and `vitlab push`: a run folder's model, finished or
not, uploaded to the Hugging Face Hub with its model card.

A finished run's folder is a model folder: its training summary and metrics go into the card as
`save_pretrained` put them there. An unfinished one gives its newest intact checkpoint's model, as
predict, eval and export take it (unfinished.py); any other checkpoint `vitlab.load` reads works too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitlab.model import BiTResNet, VisionTransformer
from vitlab.weights.folder import is_vitlab_folder, read_config
from vitlab.weights.push import check_online, check_repo_id, push_model

from .unfinished import load_model


def push_to_hub(
    source: str | Path | VisionTransformer | BiTResNet,
    repo_id: str,
    *,
    private: bool | None = None,
    revision: str | None = None,
    commit_message: str | None = None,
    token: str | None = None,
    memory_limit: float | None = None,
) -> str:
    """Upload a run folder's model (or a model, or any checkpoint `vitlab.load` reads) to `repo_id`
    as a vitlab model folder with its model card; returns the commit's URL. The repository id and
    the network are checked before the model is loaded."""
    check_repo_id(repo_id)
    check_online(repo_id)
    options: dict[str, Any] = dict(private=private, revision=revision, commit_message=commit_message, token=token)
    if isinstance(source, (VisionTransformer, BiTResNet)):
        return push_model(source, repo_id, **options)
    model = load_model(source, memory_limit=memory_limit)
    extra = read_config(source)[1] if is_vitlab_folder(source) else {}  # the run's summary, for the card
    return push_model(model, repo_id, **options, **extra)
