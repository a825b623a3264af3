"""OpenVINO, Intel's inference runtime, as a peer: on Intel CPUs with AMX it is what a user would pick
instead of timm, so it has rows of its own and its own targets (targets.OPENVINO_TARGETS), never the
best peer of the standard ones.

vitlab's model is converted by openvino.convert_model (traced on an example batch), reshaped to the
case's batch and compiled for the CPU with the case's dtype as INFERENCE_PRECISION_HINT,
PERFORMANCE_HINT=LATENCY, one stream and torch's intra-op thread count. `runtime_config` is what the
compiled model reports back for those settings, which the bench JSON records: where the CPU has no
native bf16, OpenVINO computes a bf16 case in f32 and reports f32.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn

from vitlab.model import VisionTransformer, ViTConfig

PRECISIONS = {"fp32": "f32", "bf16": "bf16"}  # a case's dtype as OpenVINO names it
PROPERTIES = ("INFERENCE_PRECISION_HINT", "PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS")


class OpenVinoModel(nn.Module):
    """`model` run by OpenVINO on the CPU: fp32 images (B, C, H, W) in, fp32 logits out, once `compile`d."""

    def __init__(self, model: nn.Module, config: ViTConfig) -> None:
        super().__init__()
        import openvino

        model.eval()
        example = torch.zeros(1, config.in_channels, *config.image_size)
        with warnings.catch_warnings():  # tracing warns of shape checks it freezes at the example's size
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.filterwarnings("ignore", message="`torch.jit.trace", category=FutureWarning)
            self.graph = openvino.convert_model(model, example_input=example)
        self.version = openvino.get_version()
        self.request = None
        self.runtime_config: dict[str, str] | None = None

    def compile(self, dtype: str, shape: tuple[int, ...], threads: int) -> None:
        """Compile for images of `shape`, computing in `dtype` ("fp32" | "bf16") where the CPU can."""
        import openvino

        self.graph.reshape(list(shape))
        settings = {
            "INFERENCE_PRECISION_HINT": PRECISIONS[dtype],
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": 1,
            "INFERENCE_NUM_THREADS": threads,
        }
        compiled = openvino.Core().compile_model(self.graph, "CPU", settings)
        reported = {name: compiled.get_property(name) for name in PROPERTIES}
        precision = reported["INFERENCE_PRECISION_HINT"]
        reported["INFERENCE_PRECISION_HINT"] = getattr(precision, "get_type_name", lambda: str(precision))()
        self.runtime_config = {
            "openvino": self.version,
            "requested_precision": PRECISIONS[dtype],
            **{name: str(value) for name, value in reported.items()},
        }
        self.request = compiled.create_infer_request()

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.request is None:
            raise RuntimeError("the OpenVINO model runs once compiled (OpenVinoModel.compile)")
        self.request.infer({0: images.float().numpy()}, share_inputs=True)
        return torch.from_numpy(np.array(self.request.get_output_tensor(0).data))


def emulation_note(runtime_config: dict | None) -> str | None:
    """What a row says where the runtime computes in another precision than the case asked for."""
    if not runtime_config or runtime_config["INFERENCE_PRECISION_HINT"] == runtime_config["requested_precision"]:
        return None
    asked, computed = runtime_config["requested_precision"], runtime_config["INFERENCE_PRECISION_HINT"]
    return f"{asked} computed in {computed}: no native {asked} on this CPU"


def build_openvino(config: ViTConfig) -> nn.Module:
    return OpenVinoModel(VisionTransformer(config), config)
