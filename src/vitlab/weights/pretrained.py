"""Catalogue weights as models: `vitlab.load("B/16:augreg-in21k")`, and the one public `create_model`
(`vitlab.create_model("B/16", pretrained=TAG)`), which builds with the model layer's `create_untrained`."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from torch import nn

from vitlab.errors import CheckpointError
from vitlab.memory.budget import check_memory
from vitlab.model import BiTConfig, BiTResNet, ConfigError, VisionTransformer, ViTConfig, config_for, create_untrained
from vitlab.model.aliases import from_timm_name, is_timm_name
from vitlab.model.factory import resolved_config

from .catalogue import CATALOGUE, IN1K_CLASSES, CatalogueError, Pretrained, find, list_pretrained
from .fetch import fetch
from .hub import cached_model
from .local import load_file

log = logging.getLogger("vitlab")

# The numerics of the reference code the weights were trained with (vit_jax, Flax): they apply
# whichever of an entry's files is read, so a converted copy computes what the official one does.
VIT_JAX_NUMERICS = dict(act="gelu_tanh", norm_eps=1e-6, pos_resample="linear_zoom", pos_resample_antialias=False)


def as_vit(model: VisionTransformer | BiTResNet, entry: Pretrained, path: Path) -> VisionTransformer:
    """The catalogue holds ViTs (hybrids included): a file that loads as another model is not its entry's."""
    if not isinstance(model, VisionTransformer):
        raise CheckpointError(f"{entry.name}: {path.name} is not this model: a {type(model).__name__}, not a ViT")
    return model


def registry_config(entry: Pretrained) -> ViTConfig:
    """The registry's config of the entry's model."""
    config = config_for(entry.model)
    assert isinstance(config, ViTConfig)  # the catalogue's models are ViTs and hybrids
    return config


def check_matches(entry: Pretrained, path: Path) -> VisionTransformer:
    """Load `path` and check it is the model the entry names: a file recorded under the wrong name
    (or replaced at its source) is refused before it enters the cache."""
    return check_model(entry, as_vit(load_file(path), entry, path), path)


# The checks an override decides instead of the file: a new head, a resampled E_pos.
OVERRIDDEN_BY = {"classes": "num_classes", "image size": "image_size"}


def check_model(
    entry: Pretrained, model: VisionTransformer, path: Path, overrides: dict[str, Any] | None = None
) -> VisionTransformer:
    """`model`, read from `path`, is the model the entry names (what `overrides` changed aside)."""
    config, expected = model.config, registry_config(entry)
    found = {
        "patch size": (config.patch_size, expected.patch_size),
        "width": (config.dim, expected.dim),
        "depth": (config.depth, expected.depth),
        "classes": (config.num_classes, entry.file_num_classes),
        "image size": (config.image_size, (entry.image_size, entry.image_size)),
    }
    decided = {what for what, key in OVERRIDDEN_BY.items() if key in (overrides or {})}
    wrong = [
        f"{what} {got} (expected {want})" for what, (got, want) in found.items() if got != want and what not in decided
    ]
    if entry.zeroed_head and isinstance(model.head, nn.Linear) and (model.head.weight.any() or model.head.bias.any()):
        wrong.append("a head that is not zero (the catalogue records this release's head as zeroed)")
    if wrong:
        raise CheckpointError(f"{entry.name}: {path.name} is not this model: {', '.join(wrong)}")
    return model


def as_feature_extractor(model: VisionTransformer, entry: Pretrained) -> VisionTransformer:
    """Drop a zeroed head and keep the pre-logits layer: the output is the representation (B, D)."""
    model.head = nn.Identity()
    model.config = model.config.replace(num_classes=0, class_names=None)
    log.info(
        "%s: a feature extractor: the released ImageNet-21k head is zeroed, so it has no classes; "
        "the output is the %d-wide pre-logits (tanh) representation",
        entry.name,
        model.config.feature_dim,
    )
    return model


def imagenet_class_names() -> list[str]:
    """The 1000 ImageNet-1k class names in the standard (sorted-synset) order, which is also the
    label order of the vit_jax checkpoints; torchvision ships them with its weight metadata."""
    from torchvision.models import ViT_B_16_Weights

    return list(ViT_B_16_Weights.IMAGENET1K_V1.meta["categories"])


# sha256 of ImageNet-1k's 1000 WordNet IDs (ILSVRC2012's synsets, the class folders of its train and
# val sets), sorted and joined by newlines; timm ships the list as timm/data/_info/imagenet_synsets.txt.
IMAGENET_WNIDS_SHA256 = "385e0240499426c022b773be1ae4da780f057b89c9694c7f47199f62746b6edd"


def imagenet_folders(names: list[str]) -> bool:
    """`names` are ImageNet-1k's WordNet IDs (n01440764, ...) in sorted order: the classes of an ImageNet
    ImageFolder, whose k-th is the k-th of imagenet_class_names()."""
    digest = hashlib.sha256("\n".join(map(str, names)).encode()).hexdigest()
    return len(names) == IN1K_CLASSES and digest == IMAGENET_WNIDS_SHA256


def hub_cache_copy(entry: Pretrained) -> tuple[str, Path] | None:
    """(repository, what load_file reads) of the first of the entry's Hub repositories in the local
    Hugging Face cache; None when none is there."""
    for repo in entry.hub_repos:
        path = cached_model(repo, weights_alone=repo == entry.timm_id)
        if path is not None:
            return repo, path
    return None


def read_hub_cache_first(entry: Pretrained) -> Path | None:
    """The entry's model in the local Hugging Face cache, logged, if one of its repositories is there."""
    found = hub_cache_copy(entry)
    if found is not None:
        log.info("%s: reading %s from the Hugging Face cache (%s)", entry.name, *found)
    return None if found is None else found[1]


def load_pretrained(name: str, **overrides: Any) -> VisionTransformer:
    """The model of catalogue entry "MODEL:TAG": from the Hugging Face cache when its Hub repository
    is there, else from vitlab's cache, downloaded into it on first use.

    Overrides work as in `vitlab.load`: e.g. num_classes=10 resets the head for fine-tuning and
    image_size=384 resamples E_pos.
    """
    entry = find(name)
    hub_copy = read_hub_cache_first(entry)
    path = hub_copy or fetch(entry, check=lambda file: check_matches(entry, file))
    options: dict[str, Any] = dict(VIT_JAX_NUMERICS, preprocessing=entry.preprocessing, name=entry.name)
    if (
        hub_copy is not None and hub_copy.is_file()
    ):  # a timm file does not record its head count; the entry's model does
        options["num_heads"] = registry_config(entry).num_heads
    if entry.num_classes == IN1K_CLASSES and "num_classes" not in overrides:  # a new head has its own names
        options["class_names"] = imagenet_class_names()
    options.update(overrides)
    model = as_vit(load_file(path, **options), entry, path)
    if hub_copy is not None:  # huggingface_hub verified the download; whether it is this model, not
        check_model(entry, model, path, overrides)
    if entry.zeroed_head and "num_classes" not in overrides:  # a new head (fine-tuning) replaces it anyway
        model = as_feature_extractor(model, entry)
    return model


# How pretrained=True ranks a model's tags (default_tag): AugReg's before the paper's, ImageNet-1k
# classifiers before the ImageNet-21k weights, as timm's default tags are.
DEFAULT_TAG_ORDER = (
    "augreg-in21k-ft-in1k",
    "augreg-in21k-ft-in1k-384",
    "orig-in21k-ft-in1k-224",
    "orig-in21k-ft-in1k",
    "augreg-in1k",
    "augreg-in1k-384",
    "augreg-in21k",
    "orig-in21k",
)


def default_tag(model: str) -> str:
    """The tag `create_model(model, pretrained=True)` loads: an ImageNet-1k classifier at 224 px,
    else one at another size, else the first tag of DEFAULT_TAG_ORDER the model has."""
    entries = {entry.tag: entry for entry in list_pretrained(model)}
    if not entries:
        find(f"{model}:none")  # raises, naming the models that have weights
    ranked = [tag for tag in DEFAULT_TAG_ORDER if tag in entries] + sorted(set(entries) - set(DEFAULT_TAG_ORDER))
    for wanted in (
        lambda e: e.num_classes == IN1K_CLASSES and e.image_size == 224,
        lambda e: e.num_classes == IN1K_CLASSES,
        lambda e: True,
    ):
        for tag in ranked:
            if wanted(entries[tag]):
                return tag
    raise AssertionError  # unreachable: the last filter takes any tag


def default_tag_at(model: str, image_size: int) -> str:
    """The default tag among those at one resolution (a timm name fixes it), classifiers first."""
    at_size = [CATALOGUE[f"{model}:{tag}"] for tag in DEFAULT_TAG_ORDER if f"{model}:{tag}" in CATALOGUE]
    at_size = [entry for entry in at_size if entry.image_size == image_size]
    for entry in sorted(at_size, key=lambda e: e.num_classes != IN1K_CLASSES):  # stable: keeps the order
        return entry.tag
    tags = ", ".join(entry.tag for entry in list_pretrained(model)) or "none"
    raise CatalogueError(f"no pretrained weights for {model} at {image_size} px; its tags: {tags}")


def resolve_pretrained(name: str, pretrained: str | bool) -> tuple[str, str, int | None]:
    """(registry name, catalogue tag or MODEL:TAG, the resolution a timm name asks for)."""
    size = None
    timm_tag = None
    if is_timm_name(name):
        alias = from_timm_name(name)
        if alias is None:
            config_for(name)  # raises, naming the timm names vitlab reads
        assert alias is not None
        name, size, timm_tag = alias.model, alias.image_size, alias.tag
    if isinstance(pretrained, str):
        return name, pretrained, size
    tag = timm_tag or (default_tag_at(name, size) if size is not None else default_tag(name))
    log.info("create_model(pretrained=True): the weights %s:%s", name, tag)
    return name, tag, size


def create_model(
    name: str | ViTConfig | BiTConfig = "B/16", pretrained: str | bool | None = None, **overrides: Any
) -> VisionTransformer | BiTResNet:
    """A model from the registry, freshly initialised or, with `pretrained`, with catalogue weights.

    >>> model = create_model("B/16", pretrained="augreg-in21k", num_classes=10)  # doctest: +SKIP

    `pretrained` is a TAG of the model ("augreg-in21k"), a full "MODEL:TAG" name, or True for the
    model's default tag (default_tag). timm's names work too: "vit_base_patch16_224" is B/16 at
    224 px, and "vit_base_patch16_224.augreg_in21k" with pretrained=True loads those weights.
    """
    if pretrained is None or pretrained is False:
        memory_limit = overrides.pop("memory_limit", None)
        config = resolved_config(name, **overrides)
        check_memory(config, limit=memory_limit, source=config.name)  # before anything is allocated
        return create_untrained(config)
    if not isinstance(name, str):
        raise ConfigError("pretrained= needs a registered model name such as 'B/16', not a config")
    if not isinstance(pretrained, (str, bool)):
        raise ConfigError(f"pretrained={pretrained!r}: give True, a tag such as 'augreg-in21k' or MODEL:TAG")
    name, tag, size = resolve_pretrained(name, pretrained)
    entry = find(tag if ":" in tag else f"{name}:{tag}")
    if entry.model != name:
        raise ConfigError(f"pretrained={pretrained!r} holds weights of {entry.model}, not of {name}")
    if size is not None and size != entry.image_size:  # a timm name fixes the resolution: E_pos resampled
        overrides.setdefault("image_size", size)
    return load_pretrained(entry.name, **overrides)
