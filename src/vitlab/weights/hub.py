"""`vitlab.load("hf://org/name[@revision]")`: a Hugging Face Hub repository through huggingface_hub;
and the weights file of a repository already in the local HF cache, which the catalogue reads first.

The repository is any folder `vitlab.load` reads: one that `save_pretrained` wrote and was uploaded,
a transformers ViT, or a timm model repository (config.json with "architecture", "model_args",
"label_names" and "pretrained_cfg", beside model.safetensors; timm_folder.py). huggingface_hub keeps it in its own cache (HF_HUB_CACHE) and
serves it from there offline (HF_HUB_OFFLINE=1, or VITLAB_OFFLINE=1).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from huggingface_hub import snapshot_download, try_to_load_from_cache
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

from vitlab.errors import CheckpointError
from vitlab.model import BiTResNet, VisionTransformer
from vitlab.version import __version__

from .fetch import is_offline
from .hf import PICKLE
from .local import load_file

log = logging.getLogger("vitlab")

PREFIX = "hf://"
REFERENCE = re.compile(r"^hf://(?P<repo>[\w.-]+/[\w.-]+)(?:@(?P<revision>[\w./-]+))?$")
# Configs, safetensors weights and the model card; pytorch_model.bin only for repositories without
# safetensors (many old ones hold .bin, .h5 and .msgpack copies of the same weights).
WANTED = ["*.json", "*.safetensors", "README.md"]
# A timm repository's weights, in the order timm's own loader (load_state_dict_from_hf) tries them.
TIMM_WEIGHTS = ("model.safetensors", PICKLE)


def parse_reference(source: str) -> tuple[str, str | None]:
    """ "hf://org/name@rev" -> ("org/name", "rev"); the revision is None for the default branch."""
    match = REFERENCE.match(source)
    if match is None:
        raise CheckpointError(f"{source!r}: a Hub reference is hf://ORG/NAME or hf://ORG/NAME@REVISION")
    return match["repo"], match["revision"]


def download_repo(source: str) -> Path:
    """The local snapshot folder of a Hub reference (downloaded unless cached and offline)."""
    repo_id, revision = parse_reference(source)
    options: dict[str, Any] = dict(
        revision=revision, local_files_only=is_offline(), library_name="vitlab", library_version=__version__
    )
    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=WANTED, **options))
        if not any(folder.glob("*.safetensors")):
            folder = Path(snapshot_download(repo_id, allow_patterns=WANTED + [PICKLE], **options))
    except LocalEntryNotFoundError:
        where = "offline and not in the Hub cache" if is_offline() else "the Hub is unreachable and it is not cached"
        raise CheckpointError(f"{source}: {where}") from None
    except HfHubHTTPError as error:  # not found, gated, private, revision unknown
        first_line = str(error).strip().splitlines()[0]
        raise CheckpointError(f"{source}: {first_line}") from None
    return folder


def load_hub(source: str, **overrides: Any) -> VisionTransformer | BiTResNet:
    """A model from the Hub; overrides as in `vitlab.load`."""
    return load_file(download_repo(source), **overrides)


def _cached_file(repo_id: str, filenames: tuple[str, ...]) -> Path | None:
    """The first of `filenames` that the local HF cache (HF_HUB_CACHE, under HF_HOME) holds for
    `repo_id`'s default branch; never downloads."""
    for filename in filenames:
        found = try_to_load_from_cache(repo_id, filename)
        if isinstance(found, str):  # not the marker of a file the Hub is known not to have
            return Path(found)
    return None


def cached_model(repo_id: str, weights_alone: bool) -> Path | None:
    """What `load_file` reads of `repo_id` in the local HF cache: its snapshot folder when config.json is
    there beside the weights (a transformers or timm folder, as from_pretrained leaves it), else, if
    `weights_alone` reads (timm's state dicts), the weights file alone, as timm.create_model leaves it."""
    weights = _cached_file(repo_id, TIMM_WEIGHTS)
    if weights is None:
        return None
    config = _cached_file(repo_id, ("config.json",))
    if config is not None and config.parent == weights.parent:
        return weights.parent
    return weights if weights_alone else None
