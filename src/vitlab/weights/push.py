"""Uploading a model to the Hugging Face Hub: `model.push_to_hub("ORG/NAME")`, as transformers and
timm spell it.

The upload is the folder `save_pretrained` writes (config.json, model.safetensors and the README.md
model card, whose usage then loads "hf://ORG/NAME"), written to a temporary folder and sent with
huggingface_hub's `HfApi`: `create_repo(exist_ok=True)`, a branch for `revision` as transformers
creates one, then `upload_folder` in one commit. The token is huggingface_hub's (`hf auth login` or
HF_TOKEN) unless one is given. `vitlab.load("hf://ORG/NAME")` reads the repository back (hub.py).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError, HFValidationError
from huggingface_hub.utils import validate_repo_id

from vitlab.errors import CheckpointError, InputError
from vitlab.model import BiTResNet, VisionTransformer
from vitlab.version import __version__

from .card import write_model_card
from .fetch import OFFLINE_ENVS, is_offline
from .folder import save_pretrained

PR_REVISION = "refs/pr/"  # a pull request's revision exists already: no branch to create


def check_repo_id(repo_id: object) -> str:
    """`repo_id` as the Hub accepts it (NAME or ORG/NAME), else one line saying why; checked before any
    model is loaded or file written."""
    if not isinstance(repo_id, str):
        raise InputError(f"a Hub repository id is a string ORG/NAME, got {type(repo_id).__name__}")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        reason = str(error).strip().splitlines()[0].rstrip(".")
        raise InputError(f"{repo_id!r} is not a Hub repository id ({reason}); write ORG/NAME") from None
    return repo_id


def check_online(repo_id: str) -> None:
    """Uploading needs the network: an offline setting is one line before anything is written."""
    if is_offline():
        raise InputError(f"{repo_id}: pushing to the Hub needs the network, and {' / '.join(OFFLINE_ENVS)} is set")


def push_model(
    model: VisionTransformer | BiTResNet,
    repo_id: str,
    *,
    private: bool | None = None,
    revision: str | None = None,
    commit_message: str | None = None,
    token: str | None = None,
    **extra: Any,
) -> str:
    """Upload `model`'s folder (config.json, model.safetensors, README.md) to `repo_id`, creating the
    repository (private if asked; an existing one is kept as it is) and the `revision` branch if
    needed; returns the commit's URL. `extra` goes to the card as in save_pretrained (its "training"
    summary and "metrics")."""
    check_repo_id(repo_id)
    check_online(repo_id)
    api = HfApi(token=token, library_name="vitlab", library_version=__version__)
    with tempfile.TemporaryDirectory(prefix="vitlab-push-") as staging:
        folder = save_pretrained(model, Path(staging) / "model", **extra)
        num_params = sum(t.numel() for t in model.parameters())
        write_model_card(folder, model.config, num_params, dict(extra), source=f"hf://{repo_id}")
        try:
            api.create_repo(repo_id, private=private, exist_ok=True)
            if revision is not None and not revision.startswith(PR_REVISION):
                api.create_branch(repo_id, branch=revision, exist_ok=True)
            commit = api.upload_folder(
                repo_id=repo_id,
                folder_path=folder,
                revision=revision,
                commit_message=commit_message or f"Upload {model.config.name or 'a model'} with vitlab",
            )
        except HfHubHTTPError as error:  # unauthorised, forbidden, a revision that cannot be a branch
            raise CheckpointError(f"{repo_id}: {str(error).strip().splitlines()[0]}") from None
    return str(commit)


def _push_to_hub_method(self: VisionTransformer, repo_id: str, **options: Any) -> str:
    """Upload this model's folder with its model card to the Hub; see vitlab.weights.push.push_model."""
    return push_model(self, repo_id, **options)


# The convenience method hands over to this module, as save_pretrained does: model/ knows no Hub.
VisionTransformer.push_to_hub = _push_to_hub_method  # type: ignore[attr-defined]


__all__ = ["check_online", "check_repo_id", "push_model"]
