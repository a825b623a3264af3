"""An exported ONNX file as a vitlab model: `config` and forward(images) -> logits, run by onnxruntime.

Code written for the PyTorch model (`vitlab predict`, `evaluate.predict_images`, its
`eval_transform`) runs the ONNX file unchanged, so both runtimes prepare images the same way and
give the same output; `open_model(source, runtime)` picks one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

import numpy as np
import torch
from torch import nn

from .metadata import INPUT_NAME, OUTPUT_NAME, config_from_metadata
from .onnx import onnx_session

Runtime = Literal["torch", "onnx"]
RUNTIMES: tuple[str, ...] = get_args(Runtime)


class OnnxModel(nn.Module):
    def __init__(self, path: str | Path, threads: int | None = None) -> None:
        super().__init__()
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such ONNX file")
        try:
            self.session = onnx_session(path, threads)
        except ModuleNotFoundError:
            raise
        except Exception as error:  # onnxruntime raises its own Fail/InvalidProtobuf types
            raise ValueError(f"{path}: not a readable ONNX model ({str(error).splitlines()[0]})") from None
        self.config = config_from_metadata(self.session.get_modelmeta().custom_metadata_map, str(path))
        # Inference code asks a model's parameters which device its inputs go to: the CPU here.
        self.device_anchor = nn.Parameter(torch.empty(0), requires_grad=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) normalised images -> (B, K) logits."""
        feed = {INPUT_NAME: images.detach().cpu().numpy().astype(np.float32)}
        return torch.from_numpy(self.session.run([OUTPUT_NAME], feed)[0])


def open_model(source: str | Path, runtime: Runtime = "torch") -> nn.Module:
    """A checkpoint (anything vitlab.load reads) for "torch"; an exported .onnx file for "onnx"."""
    if runtime == "onnx":
        return OnnxModel(source)
    if runtime == "torch":
        from vitlab.weights import load

        return load(source)
    raise ValueError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
