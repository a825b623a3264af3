"""The pretrained-weights catalogue: "B/16:augreg-in21k" -> the official file, its checksum and licence.

Names are MODEL:TAG, MODEL a registry name ("Ti/16", "B/16", "R50+B/16") and TAG what the weights
saw, as timm names them:

    orig-in21k                  the paper's ImageNet-21k pre-training (vit_jax, 224 px), a feature
                                extractor: its 21k head was released zeroed (below)
    orig-in21k-ft-in1k          ... fine-tuned on ImageNet-1k at 384 px (the paper's Table 2 setting)
    orig-in21k-ft-in1k-224      ... fine-tuned at 224 px
    augreg-in21k                "How to train your ViT?" (Steiner et al., 2021), ImageNet-21k, 224 px
    augreg-in21k-ft-in1k        ... fine-tuned on ImageNet-1k at 224 px; `-384` at 384 px
    augreg-in1k                 AugReg trained on ImageNet-1k alone, 224 px; `-384` at 384 px

Every file is Google's own release (the vit_models bucket, Apache-2.0), the layout
`weights/npz.py` reads. Google publishes no checksums for them, so their sha256 is None and
`fetch.py` records the digest of the first download ("trust on first use"). The paper's
original weights were also converted by timm into release files whose names carry the first
8 hex digits of their sha256 (torch.hub's convention); those are listed as a second source with
that prefix as their checksum.

Each entry also names its Hugging Face Hub repositories: timm's (`timm/ARCH.TAG`, named by
`timm_hub_id`), where timm publishes the weights, and Google's transformers conversion (`google/...`)
of the paper's weights. `hub_repos` are looked for in the local HF cache before any download.

The paper's ImageNet-21k files carry a pre-logits (tanh) layer and a 21843-way head that is all
zeros (timm's records: "classifier not valid", served with num_classes=0). Those entries are
feature extractors: the head is dropped on loading, and the model's output is the pre-logits
representation, the layer the paper's few-shot evaluation reads (Sec. 4.1, Appendix B.2).

Mean/std are 0.5 (pixels to [-1, 1]) for every file; vit_jax evaluates by resizing the whole
image to the model size (no crop), bilinearly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vitlab.model import Preprocessing
from vitlab.model.aliases import TIMM_HYBRIDS

VIT_MODELS = "https://storage.googleapis.com/vit_models"
TIMM_RELEASES = "https://github.com/rwightman/pytorch-image-models/releases/download/v0.1-vitjx"
APACHE = "Apache-2.0"
IN21K_CLASSES = 21843  # the classes of the released ImageNet-21k heads
IN1K_CLASSES = 1000

NAME = re.compile(r"^(?P<model>[A-Za-z0-9+]+/\d+):(?P<tag>[a-z0-9][a-z0-9-]*)$")


class CatalogueError(ValueError):
    """A MODEL:TAG name the catalogue does not hold."""


@dataclass(frozen=True)
class Download:
    """One place a checkpoint file can be fetched from."""

    url: str
    # Full hex digest, or a prefix of at least 8 hex digits; None when no public source gives one.
    sha256: str | None = None


@dataclass(frozen=True)
class Pretrained:
    """One released checkpoint: where it lives and what it expects."""

    model: str
    tag: str
    downloads: tuple[Download, ...]  # tried in order; the official file first
    image_size: int
    num_classes: int
    dataset: str
    paper: str
    license: str = APACHE
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    timm_id: str | None = None  # the same weights on the Hugging Face Hub, converted by timm (timm_hub_id)
    hf_id: str | None = None  # ... and converted by transformers
    zeroed_head: bool = False  # the file's head is all zeros: a feature extractor (num_classes 0)

    @property
    def name(self) -> str:
        return f"{self.model}:{self.tag}"

    @property
    def hub_repos(self) -> tuple[str, ...]:
        """The Hub repositories whose files are this entry's model, in the order the HF cache is searched
        before any download: timm's, then Google's transformers conversion.

        None for the paper's ImageNet-21k files: timm's conversion dropped their pre-logits layer (its
        checkpoint filter skips `pre_logits`), the representation those entries are read for, and
        Google's are transformers' ViTModel, whose head the catalogue's check cannot see.
        """
        return () if self.zeroed_head else tuple(repo for repo in (self.timm_id, self.hf_id) if repo)

    @property
    def file_num_classes(self) -> int:
        """Outputs of the head stored in the file (a zeroed head still has its 21843 rows)."""
        return IN21K_CLASSES if self.zeroed_head else self.num_classes

    @property
    def preprocessing(self) -> Preprocessing:
        """vit_jax's evaluation (the whole image resized to the model's size, bilinear) with the entry's statistics."""
        return Preprocessing(mean=self.mean, std=self.std, crop_pct=1.0, interpolation="bilinear", crop_mode="squash")


# -- the paper's weights (Dosovitskiy et al., 2021) --------------------------------------------------
ORIGINAL = "Dosovitskiy et al., ICLR 2021"
TIMM_SIZES = {"Ti": "tiny", "S": "small", "B": "base", "L": "large", "H": "huge"}
TIMM_HYBRID_NAMES = {model: architecture for architecture, model in TIMM_HYBRIDS.items()}


def timm_hub_id(model: str, image_size: int, tag: str) -> str:
    """timm's Hub repository of an entry, by timm's naming rule ("B/16", 224, "augreg-in21k-ft-in1k" ->
    "timm/vit_base_patch16_224.augreg_in21k_ft_in1k"); the tag's size suffix is in the architecture's name.
    A test checks it against every entry's `hf_hub_id` in timm's pretrained configs."""
    tag = tag.removesuffix(f"-{image_size}")
    if model in TIMM_HYBRID_NAMES:
        architecture = f"{TIMM_HYBRID_NAMES[model]}_{image_size}"
    else:
        size, patch = model.split("/")
        architecture = f"vit_{TIMM_SIZES[size]}_patch{patch}_{image_size}"
    return f"timm/{architecture}.{tag.replace('-', '_')}"


def _original(
    model: str, tag: str, file: str, image_size: int, timm_file: str | None, on_timm_hub: bool, hf_id: str | None
) -> Pretrained:
    in1k = tag.startswith("orig-in21k-ft-in1k")
    folder = "imagenet21k+imagenet2012" if in1k else "imagenet21k"
    downloads = [Download(f"{VIT_MODELS}/{folder}/{file}")]
    if timm_file is not None:
        digest_prefix = timm_file.rsplit("-", 1)[1].removesuffix(".pth")
        downloads.append(Download(f"{TIMM_RELEASES}/{timm_file}", sha256=digest_prefix))
    return Pretrained(
        model=model,
        tag=tag,
        downloads=tuple(downloads),
        image_size=image_size,
        num_classes=IN1K_CLASSES if in1k else 0,
        dataset="ImageNet-21k, fine-tuned on ImageNet-1k" if in1k else "ImageNet-21k",
        paper=ORIGINAL,
        timm_id=timm_hub_id(model, image_size, tag) if on_timm_hub else None,
        hf_id=hf_id,
        zeroed_head=not in1k,
    )


ORIGINAL_WEIGHTS = [
    # model, tag, vit_models file, image size, timm's release file (sha256 prefix in its name), whether timm's
    # Hub has it (timm_hub_id names it), transformers id
    (
        "B/16",
        "orig-in21k",
        "ViT-B_16.npz",
        224,
        "jx_vit_base_patch16_224_in21k-e5005f0a.pth",
        True,
        "google/vit-base-patch16-224-in21k",
    ),
    (
        "B/32",
        "orig-in21k",
        "ViT-B_32.npz",
        224,
        "jx_vit_base_patch32_224_in21k-8db57226.pth",
        True,
        "google/vit-base-patch32-224-in21k",
    ),
    (
        "L/16",
        "orig-in21k",
        "ViT-L_16.npz",
        224,
        "jx_vit_large_patch16_224_in21k-606da67d.pth",
        True,
        "google/vit-large-patch16-224-in21k",
    ),
    (
        "L/32",
        "orig-in21k",
        "ViT-L_32.npz",
        224,
        "jx_vit_large_patch32_224_in21k-9046d2e7.pth",
        True,
        "google/vit-large-patch32-224-in21k",
    ),
    (
        "H/14",
        "orig-in21k",
        "ViT-H_14.npz",
        224,
        None,
        True,
        "google/vit-huge-patch14-224-in21k",
    ),
    ("R50+B/16", "orig-in21k", "R50+ViT-B_16.npz", 224, None, True, None),
    (
        "B/16",
        "orig-in21k-ft-in1k",
        "ViT-B_16.npz",
        384,
        "jx_vit_base_p16_384-83fb41ba.pth",
        True,
        "google/vit-base-patch16-384",
    ),
    (
        "B/32",
        "orig-in21k-ft-in1k",
        "ViT-B_32.npz",
        384,
        "jx_vit_base_p32_384-830016f5.pth",
        False,
        "google/vit-base-patch32-384",
    ),
    (
        "L/16",
        "orig-in21k-ft-in1k",
        "ViT-L_16.npz",
        384,
        "jx_vit_large_p16_384-b3be5167.pth",
        False,
        "google/vit-large-patch16-384",
    ),
    (
        "L/32",
        "orig-in21k-ft-in1k",
        "ViT-L_32.npz",
        384,
        "jx_vit_large_p32_384-9b920ba8.pth",
        True,
        "google/vit-large-patch32-384",
    ),
    ("R50+B/16", "orig-in21k-ft-in1k", "R50+ViT-B_16.npz", 384, None, True, None),
    (
        "B/16",
        "orig-in21k-ft-in1k-224",
        "ViT-B_16-224.npz",
        224,
        "jx_vit_base_p16_224-80ecf9dd.pth",
        True,
        "google/vit-base-patch16-224",
    ),
    (
        "L/16",
        "orig-in21k-ft-in1k-224",
        "ViT-L_16-224.npz",
        224,
        "jx_vit_large_p16_224-4ee7a4dc.pth",
        False,
        "google/vit-large-patch16-224",
    ),
]


# -- AugReg (Steiner et al., "How to train your ViT?", TMLR 2022) -------------------------------------
AUGREG = "Steiner et al., How to train your ViT?, TMLR 2022"

# The ImageNet-21k runs the released fine-tunes start from; each name records its hyper-parameters.
AUGREG_IN21K = {
    "Ti/16": "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
    "S/32": "S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
    "S/16": "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
    "B/32": "B_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.03-do_0.0-sd_0.0",
    "B/16": "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0",
    "B/8": "B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0",
    "L/16": "L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1",
    # the ResNet + ViT hybrids
    "R+Ti/16": "R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
    "R26+S/32": "R26_S_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.03-do_0.0-sd_0.0",
    "R50+L/32": "R50_L_32-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0",
}
AUGREG_IN1K = {
    "S/16": "S_16-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0",
    "B/32": "B_32-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.1-sd_0.1",
    "B/16": "B_16-i1k-300ep-lr_0.001-aug_strong2-wd_0.1-do_0.1-sd_0.1",
}
# ImageNet-1k fine-tuning: 20k steps at this learning rate, per model.
AUGREG_FINETUNE_LR = {
    "Ti/16": "0.03",
    "S/32": "0.03",
    "S/16": "0.03",
    "B/32": "0.03",
    "B/16": "0.01",
    "B/8": "0.01",
    "L/16": "0.01",
    "R+Ti/16": "0.03",
    "R26+S/32": "0.03",
    "R50+L/32": "0.01",
}
AUGREG_384 = ("Ti/16", "S/32", "S/16", "B/32", "B/16", "L/16", "R+Ti/16", "R26+S/32", "R50+L/32")  # B/8: 224 only
# Fine-tunes that start from another upstream run than the released ImageNet-21k one.
AUGREG_FINETUNE_UPSTREAM = {
    ("B/32", 384): "B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0",
    ("R26+S/32", 224): "R26_S_32-i21k-300ep-lr_0.001-aug_light0-wd_0.03-do_0.1-sd_0.1",
    ("R50+L/32", 224): "R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1",
}


def _augreg(model: str, tag: str, file: str, image_size: int, in21k_head: bool) -> Pretrained:
    return Pretrained(
        model=model,
        tag=tag,
        downloads=(Download(f"{VIT_MODELS}/augreg/{file}.npz"),),
        image_size=image_size,
        num_classes=IN21K_CLASSES if in21k_head else IN1K_CLASSES,
        dataset="ImageNet-21k"
        if tag == "augreg-in21k"
        else "ImageNet-1k"
        if tag.startswith("augreg-in1k")
        else "ImageNet-21k, fine-tuned on ImageNet-1k",
        paper=AUGREG,
        timm_id=timm_hub_id(model, image_size, tag),
    )


def _augreg_weights() -> list[Pretrained]:
    entries = [_augreg(model, "augreg-in21k", run, 224, True) for model, run in AUGREG_IN21K.items()]
    for model, run in AUGREG_IN21K.items():
        for size in (224, 384) if model in AUGREG_384 else (224,):
            upstream = AUGREG_FINETUNE_UPSTREAM.get((model, size), run)
            file = f"{upstream}--imagenet2012-steps_20k-lr_{AUGREG_FINETUNE_LR[model]}-res_{size}"
            entries.append(_augreg(model, "augreg-in21k-ft-in1k" + ("-384" if size == 384 else ""), file, size, False))
    for model, run in AUGREG_IN1K.items():
        for size in (224, 384):
            file = f"{run}--imagenet2012-steps_20k-lr_0.01-res_{size}"
            entries.append(_augreg(model, "augreg-in1k" + ("-384" if size == 384 else ""), file, size, False))
    return entries


CATALOGUE: dict[str, Pretrained] = {
    entry.name: entry for entry in [_original(*row) for row in ORIGINAL_WEIGHTS] + _augreg_weights()
}


def is_catalogue_name(source: object) -> bool:
    """Whether `source` is written MODEL:TAG (it may still be missing from the catalogue)."""
    return isinstance(source, str) and NAME.match(source) is not None


def find(name: str) -> Pretrained:
    """The entry of "MODEL:TAG"; the error lists the tags the model has."""
    if name in CATALOGUE:
        return CATALOGUE[name]
    match = NAME.match(name)
    if match is None:
        raise CatalogueError(f"{name!r} is not a pretrained-weights name; write MODEL:TAG, e.g. 'B/16:augreg-in21k'")
    tags = sorted(entry.tag for entry in CATALOGUE.values() if entry.model == match["model"])
    if not tags:
        models = sorted({entry.model for entry in CATALOGUE.values()})
        raise CatalogueError(
            f"{name}: no pretrained weights for model {match['model']!r}; models with weights: {', '.join(models)}"
        )
    raise CatalogueError(f"{name}: unknown tag {match['tag']!r} for {match['model']}; its tags: {', '.join(tags)}")


def list_pretrained(model: str | None = None) -> list[Pretrained]:
    """Catalogue entries, all or those of one model, in catalogue order."""
    return [entry for entry in CATALOGUE.values() if model is None or entry.model == model]


__all__ = ["CATALOGUE", "CatalogueError", "Download", "Pretrained", "find", "is_catalogue_name", "list_pretrained"]
