"""A timm model folder: what timm's hub writer (timm/models/_hub.py, save_for_hf) and vitlab's timm
export write, and what the Hub serves for timm's models.

config.json names the architecture (timm's model name), the keyword arguments that rebuild the
exact model over the architecture's defaults ("model_args"), the class names ("label_names"), the
pooling ("global_pool") and the preprocessing ("pretrained_cfg"); the weights are model.safetensors
or pytorch_model.bin. An architecture of a timm module whose models vitlab's ViT and BiT ResNet do
not compute is refused by name before any weight is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitlab.errors import CheckpointError
from vitlab.textfiles import TextFileError, read_json

from .head_counts import behaviour_of_model
from .head_table import TIMM_MODULES
from .timm import TimmRecord

CONFIG_FILE = "config.json"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
BIT_MODULE = "timm.models.resnetv2"  # timm's BiT: resnetv2_{depth}x{width}_bit
HOLDABLE_MODULES = (*TIMM_MODULES, BIT_MODULE)


def timm_document(directory: Path) -> dict[str, Any] | None:
    """The folder's config.json if it describes a timm model (a string "architecture"), else None."""
    try:
        document = read_json(directory / CONFIG_FILE)
    except (OSError, TextFileError):
        return None
    if not isinstance(document, dict) or not isinstance(document.get("architecture"), str):
        return None
    return document


def timm_module(architecture: str) -> str | None:
    """The timm module that defines an architecture; None without timm or for a name it lacks."""
    try:
        from timm.models import is_model, model_entrypoint
    except ModuleNotFoundError:
        return None
    return model_entrypoint(architecture).__module__ if is_model(architecture) else None


def refuse_architecture(architecture: str, source: str) -> None:
    """One line naming a timm architecture that is not a ViT or BiT ResNet vitlab holds."""
    module = timm_module(architecture)
    if module is not None:
        if module not in HOLDABLE_MODULES:
            raise CheckpointError(
                f"{source}: timm's {architecture} ({module}) is not a model vitlab holds; it reads timm's "
                "VisionTransformer (plain, DeiT, R+ViT hybrids) and ResNetV2 BiT models"
            )
        return
    is_bit = architecture.startswith("resnetv2_") and architecture.endswith("_bit")
    if behaviour_of_model(architecture) is None and not is_bit and not architecture.startswith("vit_"):
        raise CheckpointError(
            f"{source}: timm architecture {architecture!r} is not one vitlab reads (install timm to check "
            "another timm name)"
        )


def timm_weights(directory: Path) -> Path:
    for name in WEIGHT_FILES:
        if (directory / name).is_file():
            return directory / name
    raise CheckpointError(f"{directory}: a timm folder holds {' or '.join(WEIGHT_FILES)} beside {CONFIG_FILE}")


def timm_record(document: dict[str, Any], source: str) -> TimmRecord:
    """What config.json records, checked for the types timm writes; the architecture refused by name
    when vitlab cannot hold it."""
    architecture, _, tag = document["architecture"].partition(".")
    refuse_architecture(architecture, source)
    model_args = document.get("model_args") or {}
    cfg = document.get("pretrained_cfg")
    names = document.get("label_names")
    if not isinstance(model_args, dict) or not (cfg is None or isinstance(cfg, dict)):
        raise CheckpointError(f"{source}: model_args and pretrained_cfg must be JSON objects")
    if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise CheckpointError(f"{source}: label_names must be a list of strings")
    tagged = f"{architecture}.{tag or (cfg or {}).get('tag') or ''}".rstrip(".")
    origin = f"pretrained_cfg of {tagged} in {CONFIG_FILE}"
    if cfg is None:  # as timm does: the registry's record of the architecture (and tag) named
        cfg = registry_cfg(tagged)
        origin = f"timm's pretrained_cfg of {tagged}; {CONFIG_FILE} has none"
    return TimmRecord(
        architecture=architecture,
        model_args=model_args,
        pretrained_cfg=cfg,
        origin=origin,
        global_pool=document.get("global_pool"),
        label_names=names,
    )


def registry_cfg(name: str) -> dict[str, Any] | None:
    """timm's registered pretrained_cfg of "architecture[.tag]" (the default tag's without one);
    None without timm or for a name it has no record of."""
    try:
        from timm.models import get_pretrained_cfg
    except ModuleNotFoundError:
        return None
    try:
        found = get_pretrained_cfg(name)
    except RuntimeError:  # a tag timm does not have for the architecture
        return None
    return found.to_dict() if found is not None else None


def training_checkpoint_record(record: dict[str, Any], source: str) -> TimmRecord | None:
    """The TimmRecord of a timm train.py checkpoint ({"arch", "args"}): its model name, and the
    preprocessing its command line set over timm's pretrained_cfg of that model."""
    if not isinstance(record.get("arch"), str):
        return None
    architecture, _, tag = record["arch"].partition(".")
    refuse_architecture(architecture, source)
    args: dict[str, Any] = record["args"] if isinstance(record.get("args"), dict) else {}
    name = f"{architecture}.{tag}" if tag else architecture
    cfg = registry_cfg(name)
    if cfg is None:
        return TimmRecord(architecture=architecture)
    set_by_args = {key: args[key] for key in ("mean", "std", "crop_pct", "interpolation", "crop_mode") if args.get(key)}
    origin = f"timm's pretrained_cfg of {name}" + (f", with train.py's {', '.join(set_by_args)}" if set_by_args else "")
    return TimmRecord(architecture=architecture, pretrained_cfg={**cfg, **set_by_args}, origin=origin)
