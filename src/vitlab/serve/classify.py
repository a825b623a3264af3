"""From uploaded bytes to the top-5 classes and an Attention Rollout overlay, within limits.

An upload is refused before decoding when it is larger than `max_bytes` or its header declares
more than `max_pixels`; anything that does not decode is a BadImageError whose message names the
reason. The image is prepared as evaluation prepares it (resize, centre crop, the checkpoint's
mean/std), and the overlay comes from the same forward pass as the probabilities. A BiT ResNet
has no attention: it is served with the top-5 alone (`has_overlay` False).
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from matplotlib import colormaps
from PIL import Image

from vitlab.accel import accelerate
from vitlab.analysis import attention_maps, display_images, upsample_map
from vitlab.data import BadImageError, read_image
from vitlab.data.images import FORMATS
from vitlab.evaluate.predict import eval_transform
from vitlab.model import BiTResNet, VisionTransformer

TOP_K = 5
HEAT_ALPHA = 0.5  # how strongly the rollout colours the image


@dataclass(frozen=True)
class Limits:
    max_bytes: int = 10 * 1024 * 1024  # 10 MiB: any photo; far below what strains memory
    max_pixels: int = 40_000_000  # e.g. 8000 x 5000; decoding allocates 3 bytes per pixel


@dataclass
class Prediction:
    top: list[tuple[str, float]]  # (label, probability), most likely first
    model_input: Image.Image | None = None  # the resized, cropped image the model saw (enlarged)
    overlay: Image.Image | None = None  # the same with the rollout as a heat map

    def as_json(self) -> dict:
        return {"top": [{"label": label, "prob": round(prob, 6)} for label, prob in self.top]}


def declared_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the image header, without decoding; None when PIL cannot tell
    (read_image then says why the upload is unusable)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data), formats=FORMATS) as image:
                return image.size
    except Exception:  # unidentified, truncated header, decompression bomb: all reported by read_image
        return None


def heat_overlay(image: np.ndarray, heat: np.ndarray) -> np.ndarray:
    """image (H, W, 3) and heat (H, W), both in [0, 1] -> the image tinted by a jet colour map."""
    colours = colormaps["jet"](heat)[..., :3]
    return (1.0 - HEAT_ALPHA) * image + HEAT_ALPHA * colours


def to_pil(pixels: np.ndarray | torch.Tensor) -> Image.Image:
    array = np.asarray(pixels, dtype=np.float32)
    return Image.fromarray((np.clip(array, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8))


class ImageClassifier:
    """A loaded ViT, hybrid or BiT ResNet behind a bytes-in, labels-out interface."""

    def __init__(self, model: VisionTransformer | BiTResNet, limits: Limits = Limits()) -> None:
        self.model = accelerate(model).eval()  # vitlab's CPU paths, in place
        self.limits = limits
        self.has_overlay = hasattr(model, "forward_with_attention")  # rollout needs attention
        config = model.config
        self.transform = eval_transform(config)  # resize, centre crop, the checkpoint's mean/std
        self.top_k = min(TOP_K, config.num_classes)
        if self.top_k < 1:
            raise ValueError(f"{config.name or 'model'}: has no classifier head (num_classes=0); nothing to serve")

    def label(self, index: int) -> str:
        names = self.model.config.class_names
        return names[index] if names else f"class {index}"

    def check_size(self, num_bytes: int, name: str = "upload") -> None:
        if num_bytes > self.limits.max_bytes:
            raise BadImageError(
                name,
                f"{num_bytes / 2**20:.1f} MiB is above the upload limit of {self.limits.max_bytes / 2**20:.0f} MiB",
            )

    def decode(self, data: bytes, name: str = "upload") -> Image.Image:
        """The upload as an RGB image, or BadImageError naming why not."""
        limits = self.limits
        self.check_size(len(data), name)
        size = declared_size(data)
        if size is not None and size[0] * size[1] > limits.max_pixels:
            raise BadImageError(
                name, f"{size[0]} x {size[1]} pixels is above the limit of {limits.max_pixels / 1e6:.0f} megapixels"
            )
        return read_image(data, name=name)

    @torch.no_grad()
    def classify(self, data: bytes, name: str = "upload", with_overlay: bool = True) -> Prediction:
        images = self.transform(self.decode(data, name))[None]  # (1, C, H, W)
        with_overlay = with_overlay and self.has_overlay
        if with_overlay:
            maps = attention_maps(self.model, images)
            logits = maps.logits
        else:
            logits = self.model(images)
        probs = logits.float().softmax(dim=-1)[0]
        values, indices = probs.topk(self.top_k)
        top = [(self.label(int(i)), float(p)) for p, i in zip(values, indices)]
        if not with_overlay:
            return Prediction(top)
        pre = self.model.config.preprocessing
        shown = display_images(images, pre.mean, pre.std)[0].numpy()  # (H', W', 3) in [0, 1]
        heat = upsample_map(maps.rollout, shown.shape[:2])[0].numpy()
        return Prediction(top, model_input=to_pil(shown), overlay=to_pil(heat_overlay(shown, heat)))
