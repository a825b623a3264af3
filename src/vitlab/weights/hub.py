"""`vitlab.load("hf://org/name[@revision]")`: a Hugging Face Hub repository through huggingface_hub.

The repository is any folder `vitlab.load` reads (one that `save_pretrained` wrote and was
uploaded, or a transformers ViT) or a timm model repository (config.json with "architecture" and
"pretrained_cfg", model.safetensors). huggingface_hub keeps it in its own cache (HF_HUB_CACHE) and
serves it from there offline (HF_HUB_OFFLINE=1, or VITLAB_OFFLINE=1).
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from huggingface_hub import snapshot_download
from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

from vitlab.errors import CheckpointError
from vitlab.model import BiTResNet, Preprocessing, VisionTransformer
from vitlab.version import __version__

from .fetch import is_offline
from .heads import heads_of_model
from .hf import PICKLE
from .local import load_file

log = logging.getLogger("vitlab")

PREFIX = "hf://"
REFERENCE = re.compile(r"^hf://(?P<repo>[\w.-]+/[\w.-]+)(?:@(?P<revision>[\w./-]+))?$")
# Configs, safetensors weights and the model card; pytorch_model.bin only for repositories without
# safetensors (many old ones hold .bin, .h5 and .msgpack copies of the same weights).
WANTED = ["*.json", "*.safetensors", "README.md"]


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


def timm_preprocessing(folder: Path) -> Preprocessing | None:
    """The preprocessing of a timm repository's config.json; None if the folder is not one."""
    try:
        document = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    # timm names its model class there; vitlab's own config.json has an "architecture" section.
    if not isinstance(document, dict) or not isinstance(document.get("architecture"), str):
        return None
    cfg = document.get("pretrained_cfg", {})
    return Preprocessing(
        mean=tuple(cfg.get("mean", (0.5,) * 3)),
        std=tuple(cfg.get("std", (0.5,) * 3)),
        crop_pct=cfg.get("crop_pct", 0.9),
        interpolation=cfg.get("interpolation", "bicubic"),
    )


def timm_num_heads(folder: Path) -> int | None:
    """The head count of a timm repository: its config.json's model_args, else its architecture's."""
    document = json.loads((folder / "config.json").read_text())
    args = document.get("model_args") or {}
    return args.get("num_heads") or heads_of_model(document["architecture"].split(".")[0])


def load_hub(source: str, **overrides: Any) -> VisionTransformer | BiTResNet:
    """A model from the Hub; overrides as in `vitlab.load`."""
    folder = download_repo(source)
    preprocessing = timm_preprocessing(folder)
    if preprocessing is not None:  # timm: a plain state dict beside timm's own config
        overrides.setdefault("preprocessing", preprocessing)
        if "num_heads" not in overrides and (num_heads := timm_num_heads(folder)) is not None:
            overrides["num_heads"] = num_heads
            log.info("%s: %d heads, from the timm config.json of the repository", source, num_heads)
        return load_file(folder / "model.safetensors", **overrides)
    return load_file(folder, **overrides)
