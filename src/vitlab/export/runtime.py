"""One interface over the two ways vitlab runs a classifier: the PyTorch model or an ONNX file.

`open_classifier(path, runtime)` gives an object with `info` (input size, preprocessing, class
names) and `logits(images)`; prediction code prepares images from `info` and never asks which
runtime it has, so both give the same output for the same file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import torch

from vitlab.model import VisionTransformer

from .metadata import INPUT_NAME, OUTPUT_NAME, ModelInfo
from .onnx import onnx_session

Runtime = Literal["torch", "onnx"]
RUNTIMES = ("torch", "onnx")


class Classifier(Protocol):
    info: ModelInfo

    def logits(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) normalised images -> (B, K) logits."""
        ...


class TorchClassifier:
    def __init__(self, model: VisionTransformer) -> None:
        self.model = model.eval()
        self.info = ModelInfo.of(model.config)

    @torch.no_grad()
    def logits(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(images)


class OnnxClassifier:
    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such ONNX file")
        try:
            self.session = onnx_session(path)
        except Exception as error:  # onnxruntime raises its own Fail/InvalidProtobuf types
            raise ValueError(f"{path}: not a readable ONNX model ({str(error).splitlines()[0]})") from None
        self.info = ModelInfo.from_strings(self.session.get_modelmeta().custom_metadata_map, str(path))

    def logits(self, images: torch.Tensor) -> torch.Tensor:
        feed = {INPUT_NAME: images.detach().cpu().numpy().astype(np.float32)}
        return torch.from_numpy(self.session.run([OUTPUT_NAME], feed)[0])


def open_classifier(source: str | Path, runtime: Runtime = "torch") -> Classifier:
    """A checkpoint (anything vitlab.load reads) for "torch"; an exported .onnx file for "onnx"."""
    if runtime == "onnx":
        return OnnxClassifier(source)
    if runtime == "torch":
        from vitlab.weights import load

        return TorchClassifier(load(source))
    raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
