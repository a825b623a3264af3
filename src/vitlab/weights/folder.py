"""vitlab's own checkpoint: a folder with config.json + model.safetensors (+ README.md, a model card).

config.json (format_version 4) groups the ViTConfig fields by what they decide:

    {"format": "vitlab", "format_version": 3,
     "architecture": {...}, "numerics": {...}, "regularisation": {...},
     "preprocessing": {...}, "class_names": [...] | null, "name": ... | null, "extra": {...}}

Version 1 wrote the same fields flat beside "format"; versions 1-2 called the per-head 2-D logit
bias pos_embed "relative" (version 3: "relative_bias"; "relative" is now the paper's); version 4 adds
preprocessing.crop_mode (null in a migrated folder: the rule of the versions before), version 5
architecture.class_token (null: a class token exactly when pool is "token", as before). Every older
version is migrated step by step to the current one on reading, so folders written by any vitlab
release keep loading.
An Axial-ViT (Appendix D.6) is a ViTConfig of another kind: the same sections and fields, plus
"kind": "axial" at the top level (KINDS); a document without "kind" is a ViT, as every earlier one
is. The tag adds no field to any version's frozen list, so the format_version stays.
A BiT ResNet (the paper's baseline) is written as {"format", "format_version", "bit": {BiTConfig
fields}, "extra"}: the ViT sections do not describe it.

What each version holds is frozen below (VERSION_FIELDS). A file lacking one of its version's
fields is refused, naming it: filling it with today's default would compute other numbers than the
model was trained with (a token model's logits move by ~5e-4 with another GELU).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from safetensors.torch import save_file

from vitlab.errors import CheckpointError
from vitlab.memory.budget import check_memory
from vitlab.model import AxialConfig, BiTConfig, BiTResNet, ConfigError, VisionTransformer, ViTConfig
from vitlab.textfiles import TextFileError, read_json

from .build import build_model, check_matches_config, check_shapes, expected_shapes
from .card import write_model_card
from .files import read_shapes, read_state_dict

FORMAT = "vitlab"
FORMAT_VERSION = 5
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"

# Version 2's sections. A ViTConfig field listed nowhere is written to "architecture" (as
# "backbone" and "mlp_out_act" were); a field added to ViTConfig belongs in a new version.
SECTIONS: dict[str, tuple[str, ...]] = {
    "architecture": (
        "image_size",
        "patch_size",
        "in_channels",
        "num_classes",
        "dim",
        "depth",
        "num_heads",
        "mlp_dim",
        "head_dim",
        "pool",
        "representation_size",
        "head_hidden",
        "pos_embed",
        "qkv_bias",
    ),
    "numerics": ("act", "norm_eps", "gap_norm", "pos_resample", "pos_resample_antialias"),
    "regularisation": ("dropout", "attn_dropout", "drop_path", "head_dropout"),
}
TOP_LEVEL = ("preprocessing", "class_names", "name")
# "kind" -> the ViTConfig type the sections are read into; absent: "vit".
KINDS: dict[str, type[ViTConfig]] = {"vit": ViTConfig, "axial": AxialConfig}

# -- what each format_version holds, frozen --------------------------------------------------------
# {path: fields}: every field must be present; a path of "" is the document's top level. A version
# that changes only values (a renamed option) holds the fields of the version before it.
PREPROCESSING_FIELDS = ("mean", "std", "crop_pct", "interpolation")
RESNET_FIELDS = (
    "layers",
    "width",
    "preact",
    "stem",
    "padding",
    "num_groups",
    "norm_eps",
    "weight_std",
    "weight_std_eps",
)
BIT_FIELDS = (
    "resnet",
    "image_size",
    "in_channels",
    "num_classes",
    "head_dropout",
    "preprocessing",
    "class_names",
    "name",
)
VERSION_2_VIT: dict[str, tuple[str, ...]] = {
    "architecture": SECTIONS["architecture"] + ("backbone", "mlp_out_act"),
    "numerics": SECTIONS["numerics"],
    "regularisation": SECTIONS["regularisation"],
    "": TOP_LEVEL,
    "preprocessing": PREPROCESSING_FIELDS,
    "architecture.backbone": RESNET_FIELDS,  # when not null (a hybrid)
}
VERSION_2_BIT: dict[str, tuple[str, ...]] = {
    "bit": BIT_FIELDS,
    "bit.resnet": RESNET_FIELDS,
    "bit.preprocessing": PREPROCESSING_FIELDS,
}
VERSION_1_VIT: dict[str, tuple[str, ...]] = {  # version 1: version 2's fields, flat
    "": sum((VERSION_2_VIT[section] for section in (*SECTIONS, "")), ()),
    "preprocessing": PREPROCESSING_FIELDS,
    "backbone": RESNET_FIELDS,
}
VERSION_3_VIT = {**VERSION_2_VIT, "architecture": VERSION_2_VIT["architecture"] + ("pos_embed_at",)}
VERSION_4_PREPROCESSING = PREPROCESSING_FIELDS + ("crop_mode",)
VERSION_4_VIT = {**VERSION_3_VIT, "preprocessing": VERSION_4_PREPROCESSING}
VERSION_4_BIT = {**VERSION_2_BIT, "bit.preprocessing": VERSION_4_PREPROCESSING}
VERSION_5_VIT = {**VERSION_4_VIT, "architecture": VERSION_4_VIT["architecture"] + ("class_token",)}
VERSION_FIELDS: dict[int, tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]] = {
    1: (VERSION_1_VIT, VERSION_2_BIT),  # (a ViT's, a BiT ResNet's)
    2: (VERSION_2_VIT, VERSION_2_BIT),
    3: (VERSION_3_VIT, VERSION_2_BIT),  # pos_embed "relative" renamed "relative_bias"; pos_embed_at added
    4: (VERSION_4_VIT, VERSION_4_BIT),  # preprocessing.crop_mode added
    5: (VERSION_5_VIT, VERSION_4_BIT),  # architecture.class_token added
}


def config_to_json(config: ViTConfig | BiTConfig, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {"format": FORMAT, "format_version": FORMAT_VERSION}
    if isinstance(config, BiTConfig):
        return {**document, "bit": config.to_dict(), "extra": dict(extra or {})}
    kind = {config_type: name for name, config_type in KINDS.items()}.get(type(config))
    if kind is None:
        raise ValueError(f"vitlab's folder format has no kind for a {type(config).__name__}; kinds: {', '.join(KINDS)}")
    if kind != "vit":
        document["kind"] = kind
    fields = config.to_dict()
    for section, names in SECTIONS.items():
        document[section] = {name: fields.pop(name) for name in names if name in fields}
    for name in TOP_LEVEL:
        document[name] = fields.pop(name)
    document["architecture"].update(fields)  # fields added to ViTConfig after this table was written
    document["extra"] = dict(extra or {})
    return document


def _v1_to_v2(document: dict[str, Any]) -> dict[str, Any]:
    """Version 1 held the ViTConfig fields flat; version 2 groups them into sections."""
    flat = {k: v for k, v in document.items() if k not in ("format", "format_version", "extra")}
    config = ViTConfig.from_dict(flat)  # every field present: require_fields checked it
    # Version 2 exactly, so that the later steps still run (version 1's "relative" is the bias too).
    return {**config_to_json(config, document.get("extra")), "format_version": 2}


def _v2_to_v3(document: dict[str, Any]) -> dict[str, Any]:
    """Version 3 gives pos_embed "relative" to the paper's relative attention (Appendix D.4); the
    per-head 2-D logit bias that version 2 called "relative" is now "relative_bias"."""
    document = json.loads(json.dumps(document))  # a deep copy: the caller's dict stays as it was
    architecture = document.get("architecture", {})
    if architecture.get("pos_embed") == "relative":
        architecture["pos_embed"] = "relative_bias"
    if "bit" not in document:
        architecture["pos_embed_at"] = "input"  # version 3's new field; before it E_pos went to the input only
    document["format_version"] = 3
    return document


def _v3_to_v4(document: dict[str, Any]) -> dict[str, Any]:
    """Version 4 records timm's crop mode; null keeps the rule every earlier version evaluated with
    (centre crop of a square input, squash otherwise)."""
    document = json.loads(json.dumps(document))
    section = document["bit"] if "bit" in document else document
    section["preprocessing"]["crop_mode"] = None
    document["format_version"] = 4
    return document


def _v4_to_v5(document: dict[str, Any]) -> dict[str, Any]:
    """Version 5 records whether there is a class token; null keeps the rule of every earlier version
    (a class token exactly when pool is "token")."""
    document = json.loads(json.dumps(document))
    if "bit" not in document:
        document["architecture"]["class_token"] = None
    document["format_version"] = 5
    return document


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
    4: _v4_to_v5,
}


def require_fields(document: dict[str, Any], version: int, source: str) -> None:
    """Refuse a document that lacks a field its format_version holds, naming the first missing."""
    vit, bit = VERSION_FIELDS[max(v for v in VERSION_FIELDS if v <= version)]
    for path, names in (bit if "bit" in document else vit).items():
        part: Any = document
        for step in filter(None, path.split(".")):
            part = part.get(step) if isinstance(part, dict) else None
        if part is None and path.endswith("backbone"):
            continue  # not a hybrid
        if part is None:
            raise CheckpointError(f"{source}: format_version {version} holds a {path!r} object; it is missing")
        if not isinstance(part, dict):
            raise CheckpointError(f"{source}: {path!r} must be a JSON object, got {type(part).__name__}")
        missing = [name for name in names if name not in part]
        if missing:
            where = f"{path}.{missing[0]}" if path else missing[0]
            raise CheckpointError(
                f"{source}: format_version {version} holds {where!r}, which is missing; vitlab does not fill in "
                f"how the model computes (add the value it was trained with)"
            )


def migrate(document: dict[str, Any], source: str = CONFIG_FILE) -> dict[str, Any]:
    """Bring a config.json of any earlier format_version to the current one."""
    version = document.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise CheckpointError(f"{source}: format_version must be a positive int, got {version!r}")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{source}: format_version {version} is newer than this vitlab reads ({FORMAT_VERSION}); upgrade vitlab"
        )
    require_fields(document, version, source)
    while version < FORMAT_VERSION:
        document = MIGRATIONS[version](document)
        version = document["format_version"]
    return document


def config_from_json(
    document: dict[str, Any], source: str = CONFIG_FILE
) -> tuple[ViTConfig | BiTConfig, dict[str, Any]]:
    """The ViTConfig (or BiTConfig) and the free-form "extra" of a vitlab config.json of any format_version."""
    if document.get("format") != FORMAT:
        raise CheckpointError(f"{source}: not a vitlab config (format {document.get('format')!r})")
    document = migrate(dict(document), source)
    if "bit" in document:
        return BiTConfig.from_dict(document["bit"]), document.get("extra", {})
    kind = document.get("kind", "vit")
    if not isinstance(kind, str) or kind not in KINDS:
        raise CheckpointError(f"{source}: unknown model kind {kind!r}; this vitlab reads {', '.join(KINDS)}")
    fields: dict[str, Any] = {}
    for section in SECTIONS:
        values = document.get(section, {})
        if not isinstance(values, dict):
            raise CheckpointError(f"{source}: {section!r} must be a JSON object, got {type(values).__name__}")
        fields.update(values)
    fields.update({name: document[name] for name in TOP_LEVEL if name in document})
    return KINDS[kind].from_dict(fields), document.get("extra", {})


def read_config(directory: str | Path) -> tuple[ViTConfig | BiTConfig, dict[str, Any]]:
    """The config of a folder; any problem with config.json is one CheckpointError naming it."""
    path = Path(directory) / CONFIG_FILE
    try:
        document = read_json(path)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no {CONFIG_FILE} in {directory}") from None
    except TextFileError as error:
        raise CheckpointError(str(error)) from None
    if not isinstance(document, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(document).__name__}")
    try:
        return config_from_json(document, str(path))
    except ConfigError as error:
        raise CheckpointError(f"{path}: {error}") from None


def is_vitlab_folder(directory: str | Path) -> bool:
    path = Path(directory) / CONFIG_FILE
    try:
        return read_json(path).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


SAVE_FORMATS = ("vitlab", "timm", "hf")


def save_pretrained(
    model: VisionTransformer | BiTResNet, directory: str | Path, format: str = "vitlab", **extra: Any
) -> Path:
    """Write config.json + model.safetensors + a README.md model card (card.py); `extra` (JSON
    values) is kept under "extra", and its "training" summary and "metrics" go into the card.

    format="timm" writes the folder timm's hub writer does (timm_writer.py), format="hf" one that
    transformers' ViTForImageClassification loads (hf_writer.py); either refuses, before writing,
    a model its library cannot hold.
    """
    if format not in SAVE_FORMATS:
        raise ValueError(f"save_pretrained: unknown format {format!r}; choose one of {', '.join(SAVE_FORMATS)}")
    if format != "vitlab":
        if extra:
            raise ValueError(f"save_pretrained: format {format!r} has no place for {', '.join(sorted(extra))}")
        from .hf_writer import save_hf
        from .timm_writer import save_timm

        return (save_timm if format == "timm" else save_hf)(model, directory)
    check_matches_config(model, f"save_pretrained({directory})")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    document = config_to_json(model.config, extra)
    try:
        text = json.dumps(document, indent=2)
    except TypeError as error:
        raise ValueError(f"save_pretrained: extra values must be JSON-serialisable ({error})") from None
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in model.state_dict().items()}
    save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    (directory / CONFIG_FILE).write_text(text + "\n")
    write_model_card(directory, model.config, sum(t.numel() for t in model.parameters()), document["extra"])
    return directory


def _save_pretrained_method(
    self: VisionTransformer, directory: str | Path, format: str = "vitlab", **extra: Any
) -> Path:
    """Write a model folder: vitlab's own (config.json + model.safetensors), or with format="timm" /
    "hf" one that timm / transformers load; see vitlab.weights.save_pretrained."""
    return save_pretrained(self, directory, format=format, **extra)


# The convenience method hands over to this module, so that model/ imports nothing of files.
VisionTransformer.save_pretrained = _save_pretrained_method  # type: ignore[attr-defined]


def load_folder(directory: str | Path, **overrides: Any) -> VisionTransformer | BiTResNet:
    """Read a folder written by save_pretrained (any format_version)."""
    directory = Path(directory)
    weights = directory / WEIGHTS_FILE
    if not weights.is_file():
        raise CheckpointError(f"{weights}: missing; a vitlab folder holds {CONFIG_FILE} and {WEIGHTS_FILE}")
    config, _ = read_config(directory)
    # Sizes before allocation: the config against the memory limit, the file's header against the config.
    check_memory(config, limit=overrides.get("memory_limit"), source=str(directory / CONFIG_FILE))
    check_shapes(expected_shapes(config), read_shapes(weights), str(weights))
    state_dict = read_state_dict(weights)
    return build_model(config, state_dict, str(directory), overrides)


__all__ = [
    "FORMAT_VERSION",
    "SAVE_FORMATS",
    "config_from_json",
    "config_to_json",
    "is_vitlab_folder",
    "load_folder",
    "read_config",
    "save_pretrained",
]
