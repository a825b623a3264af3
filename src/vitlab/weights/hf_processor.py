"""transformers' image processors (preprocessor_config.json) as vitlab's Preprocessing, and back.

Their geometry is one of two, as timm's crop modes are:
    ViTImageProcessor / DeiTImageProcessor   resize to size {height, width}, then (DeiT) centre crop:
                                             crop_mode "squash"
    BitImageProcessor / CLIPImageProcessor   resize the shorter side to size {shortest_edge}, then centre
                                             crop: crop_mode "center"
    ConvNextImageProcessor                   shorter side to shortest_edge / crop_pct, then centre crop
                                             (below 384 px); at 384 and above a squash to the size
Keys a file lacks take the processor class's defaults (transformers' image_processing_*.py).

One difference is left: a centre crop of an odd margin 2k+1 starts at pixel k in transformers
(floor) and at round(k + 0.5) in torchvision, hence vitlab and timm: one pixel apart when k is odd.
The writer says when a model's crop can meet it; the reader says when a processor's can.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from vitlab.config_fields import crop_mode_for
from vitlab.errors import CheckpointError, ConfigError
from vitlab.model import Preprocessing

from .preprocessing import crop_pct_for

log = logging.getLogger("vitlab")

PIL_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}  # PIL.Image.Resampling values
RESAMPLE_PIL = {name: value for value, name in PIL_RESAMPLE.items()}
IMAGENET_STANDARD = ([0.5] * 3, [0.5] * 3)
IMAGENET_DEFAULT = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
OPENAI_CLIP = ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])
# The defaults of each processor class vitlab reads: (size, crop_size, resample, mean and std, crop_pct).
DEFAULTS: dict[str, dict[str, Any]] = {
    "ViTImageProcessor": dict(
        size={"height": 224, "width": 224}, do_center_crop=False, resample=2, stats=IMAGENET_STANDARD
    ),
    "DeiTImageProcessor": dict(
        size={"height": 256, "width": 256},
        do_center_crop=True,
        crop_size={"height": 224, "width": 224},
        resample=3,
        stats=IMAGENET_STANDARD,
    ),
    "BitImageProcessor": dict(
        size={"shortest_edge": 224},
        do_center_crop=True,
        crop_size={"height": 224, "width": 224},
        resample=3,
        stats=OPENAI_CLIP,
    ),
    "ConvNextImageProcessor": dict(
        size={"shortest_edge": 384}, do_center_crop=False, crop_pct=224 / 256, resample=3, stats=IMAGENET_STANDARD
    ),
}
DEFAULTS["CLIPImageProcessor"] = DEFAULTS["BitImageProcessor"]  # the same resize, crop and statistics
SQUARE_BY_DEFAULT = ("ViTImageProcessor", "DeiTImageProcessor")  # an int size is (size, size) for these


def processor_type(document: dict[str, Any]) -> str:
    """The processor class a preprocessor_config.json names (old files: its feature extractor)."""
    name = document.get("image_processor_type") or document.get("feature_extractor_type") or "ViTImageProcessor"
    name = str(name).replace("FeatureExtractor", "ImageProcessor").removesuffix("Fast").removesuffix("Pil")
    return name


def size_dict(value: Any, square: bool, what: str, source: str) -> dict[str, int]:
    if isinstance(value, int):
        return {"height": value, "width": value} if square else {"shortest_edge": value}
    if isinstance(value, dict) and value and all(isinstance(v, int) for v in value.values()):
        return value
    raise CheckpointError(f"{source}: {what} {value!r} is not a size transformers reads")


def centre_crop_note(margins: list[int]) -> str:
    """What the two centre-crop roundings do with these margins ('' when they agree)."""
    odd = [m for m in margins if m % 4 == 3]
    return (
        f"; transformers starts the crop one pixel before vitlab and timm (margin {odd[0]}: floor against round)"
        if odd
        else ""
    )


def from_processor(
    document: dict[str, Any], image_size: tuple[int, int] | None, source: str
) -> tuple[Preprocessing, tuple[int, int], str]:
    """The Preprocessing that resizes and crops as this processor does for a model of `image_size`
    (None: the size the processor makes), that size, and a note for the log; a processor whose
    output vitlab's transform cannot reproduce is refused."""
    kind = processor_type(document)
    if kind not in DEFAULTS:
        raise CheckpointError(f"{source}: image processor {kind}; vitlab reads {', '.join(DEFAULTS)}")
    defaults = DEFAULTS[kind]
    mean, std, resample = pixel_steps(document, kind, defaults, image_size, source)
    unsized = "size" not in document and kind == "ViTImageProcessor" and image_size is not None
    if unsized:  # ViTImageProcessor resizes to its size: a file without one is read at the model's
        assert image_size is not None
        document = {**document, "size": {"height": image_size[0], "width": image_size[1]}}
    size, crop = resize_and_crop(document, kind, defaults, source)
    crop_mode, crop_pct, (height, width), note = crop_rule(kind, size, crop, image_size, source)
    pre = Preprocessing(
        mean=tuple(float(m) for m in mean),  # type: ignore[arg-type]
        std=tuple(float(s) for s in std),  # type: ignore[arg-type]
        crop_pct=crop_pct,
        interpolation=PIL_RESAMPLE[resample],  # type: ignore[arg-type]
        crop_mode=crop_mode,  # type: ignore[arg-type]
    )
    sized = "; no size: the model's" if unsized else ""
    return pre, (height, width), f"{kind} of preprocessor_config.json{sized}{note}"


def pixel_steps(
    document: dict[str, Any], kind: str, defaults: dict[str, Any], image_size: tuple[int, int] | None, source: str
) -> tuple[list[float], list[float], int]:
    """The processor's mean, std and resample filter, after refusing the steps vitlab's transform
    always takes (rescale by 1/255, resize) when the processor skips them."""
    mean, std = document.get("image_mean", defaults["stats"][0]), document.get("image_std", defaults["stats"][1])
    if not document.get("do_normalize", True):
        mean, std = [0.0] * 3, [1.0] * 3
    if not document.get("do_rescale", True) or not math.isclose(document.get("rescale_factor", 1 / 255), 1 / 255):
        raise CheckpointError(f"{source}: {kind} does not rescale pixels by 1/255; vitlab's transform does")
    if not document.get("do_resize", True):
        raise CheckpointError(f"{source}: {kind} does not resize; vitlab's model takes {image_size} inputs")
    resample = document.get("resample", defaults["resample"])
    if resample not in PIL_RESAMPLE:
        raise CheckpointError(f"{source}: resample {resample!r}; vitlab resizes {', '.join(PIL_RESAMPLE.values())}")
    return mean, std, resample


def resize_and_crop(
    document: dict[str, Any], kind: str, defaults: dict[str, Any], source: str
) -> tuple[dict[str, int], dict[str, int] | None]:
    """The processor's resize and centre crop as size dicts (crop None: no crop), with
    ConvNextImageProcessor's own crop_pct rule turned into the same two steps so one reading serves all."""
    size = size_dict(document.get("size", defaults["size"]), kind in SQUARE_BY_DEFAULT, "size", source)
    cropping = document.get("do_center_crop", defaults["do_center_crop"])
    crop = (
        size_dict(document.get("crop_size", defaults.get("crop_size")), True, "crop_size", source) if cropping else None
    )
    if kind == "ConvNextImageProcessor" and "shortest_edge" in size:  # its own crop_pct rule
        edge = size["shortest_edge"]
        if edge < 384:
            convnext_crop = float(document.get("crop_pct", defaults["crop_pct"]))
            size, crop = {"shortest_edge": math.floor(edge / convnext_crop)}, {"height": edge, "width": edge}
        else:
            size, crop = {"height": edge, "width": edge}, None
    return size, crop


def crop_rule(
    kind: str, size: dict[str, int], crop: dict[str, int] | None, image_size: tuple[int, int] | None, source: str
) -> tuple[str, float, tuple[int, int], str]:
    """vitlab's crop_mode and crop_pct for this resize and crop, the model's size and a note on the
    rounding, because vitlab's transform makes only crops that one crop_pct of a mode describes."""
    crop_pct: float | None
    if "shortest_edge" in size and len(size) == 1:
        height, width = image_size or ((crop["height"], crop["width"]) if crop else (0, 0))
        if crop is None or crop["height"] != crop["width"] or (crop["height"], crop["width"]) != (height, width):
            raise CheckpointError(
                f"{source}: {kind} resizes the shorter side to {size['shortest_edge']} and crops {crop}; vitlab's "
                f"centre crop keeps the aspect ratio of a square {height}x{width} input only this way with a square crop"
            )
        crop_mode, crop_pct = "center", crop_pct_for([height], [size["shortest_edge"]])
        note = f"; transformers centre-crops at floor((side - {height}) / 2), vitlab and timm round it"
    elif {"height", "width"} == set(size):
        final = (crop["height"], crop["width"]) if crop else (size["height"], size["width"])
        height, width = image_size or final
        if final != (height, width):
            raise CheckpointError(
                f"{source}: {kind} makes {final[0]}x{final[1]} images; the model takes {height}x{width}"
            )
        crop_mode, crop_pct = "squash", crop_pct_for([height, width], [size["height"], size["width"]])
        if crop_pct is None:
            raise CheckpointError(
                f"{source}: {kind} resizes to {size['height']}x{size['width']} and crops {height}x{width}: "
                "not one crop_pct for both sides"
            )
        note = centre_crop_note([size["height"] - height, size["width"] - width])
    else:
        raise CheckpointError(f"{source}: {kind} size {size}; vitlab reads height/width or shortest_edge")
    if crop_pct is None:
        raise CheckpointError(
            f"{source}: {kind} resizes to {size} and crops {crop}: not a crop vitlab's transform makes"
        )
    return crop_mode, crop_pct, (height, width), note


def to_processor(pre: Preprocessing, image_size: tuple[int, int]) -> dict[str, Any]:
    """preprocessor_config.json for transformers that resizes and crops as vitlab's transform does:
    ViTImageProcessor (squash, no crop), DeiTImageProcessor (squash and crop) or BitImageProcessor
    (the shorter side, then a centre crop). The one difference transformers cannot avoid, the centre
    crop's rounding, is logged where the model's crop can meet it."""
    height, width = image_size
    scaled = (math.floor(height / pre.crop_pct), math.floor(width / pre.crop_pct))
    common = {
        "do_resize": True,
        "resample": RESAMPLE_PIL[pre.interpolation],
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": list(pre.mean),
        "image_std": list(pre.std),
        "do_convert_rgb": True,
    }
    mode = crop_mode_for(image_size, pre.crop_mode)
    if mode == "squash":
        if scaled == (height, width):
            return {"image_processor_type": "ViTImageProcessor", "size": {"height": height, "width": width}, **common}
        note = centre_crop_note([scaled[0] - height, scaled[1] - width])
        if note:
            log.warning("hf export: resize to %dx%d and crop %dx%d%s", *scaled, height, width, note)
        return {
            "image_processor_type": "DeiTImageProcessor",
            "size": {"height": scaled[0], "width": scaled[1]},
            "do_center_crop": True,
            "crop_size": {"height": height, "width": width},
            **common,
        }
    if height != width:
        raise ConfigError(
            f"--format hf: crop_mode 'center' for a {height}x{width} input keeps the aspect ratio to cover "
            f"{scaled[0]}x{scaled[1]}, which no transformers image processor does; export with crop_mode 'squash'"
        )
    log.warning(
        "hf export: BitImageProcessor resizes the shorter side to %d and centre-crops %dx%d as vitlab does, but "
        "starts the crop at floor(margin / 2) where vitlab and timm round it: one pixel apart on images whose "
        "resized margin is 4k+3 pixels; timm's folder (--format timm, which transformers' pipeline also runs) "
        "crops as vitlab on every image",
        scaled[0],
        height,
        width,
    )
    return {
        "image_processor_type": "BitImageProcessor",
        "size": {"shortest_edge": scaled[0]},
        "do_center_crop": True,
        "crop_size": {"height": height, "width": width},
        **common,
    }
