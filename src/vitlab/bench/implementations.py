"""The implementations compared, each built at the same size from vitlab's variant table.

Every builder takes a vitlab ViTConfig (sizes, resolution, classes) and returns a module that maps
images (B, C, H, W) to logits (B, classes), with freshly initialised weights: throughput does not
depend on the values, and nothing is downloaded.

The onnxruntime contenders are vitlab's model exported to ONNX (vitlab.export), float32 or with its
linear layers quantized to int8, run on the CPU with torch's intra-op thread count: fp32 inference
only, in one mode ("eager": the session as onnxruntime optimises it). int8 computes other numbers,
so it is shown beside the others but never taken as the best peer.

"openvino" is vitlab's model run by OpenVINO (openvino.py), in fp32 and bf16 inference, in one mode
("eager": the runtime's own compiled graph). It is held to its own targets, never the best peer.

"vitlab-int8" is vitlab's own int8 path, `optimize_for_inference(model, dtype=torch.int8)` (accel/int8.py):
fp32 images in, fp32 logits out, so it runs in the fp32 case, in its one mode "fast". It too computes
other numbers and is never the best peer.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from torch import nn

from vitlab.model import BiTConfig, VisionTransformer, ViTConfig

from .openvino import build_openvino


class LogitsOnly(nn.Module):
    """Hugging Face models return an output object; the benchmark wants the logits tensor."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=images).logits


def square_size(config: ViTConfig) -> int:
    height, width = config.image_size
    if height != width:
        raise ValueError(f"the peers take square images only, got {height}x{width}")
    return height


def build_vitlab(config: ViTConfig) -> nn.Module:
    return VisionTransformer(config)


def build_timm(config: ViTConfig) -> nn.Module:
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    return TimmViT(
        img_size=config.image_size,
        patch_size=config.patch_size,
        in_chans=config.in_channels,
        num_classes=config.num_classes,
        embed_dim=config.dim,
        depth=config.depth,
        num_heads=config.num_heads,
        mlp_ratio=config.mlp_dim / config.dim,
    )


def build_transformers(config: ViTConfig, attn_implementation: str) -> nn.Module:
    from transformers import ViTConfig as HFViTConfig
    from transformers import ViTForImageClassification

    # num_labels and attn_implementation are PretrainedConfig keywords that transformers 5's generated
    # ViTConfig.__init__ accepts at run time but leaves out of its annotated signature.
    hf_config = HFViTConfig(  # type: ignore[call-arg]
        hidden_size=config.dim,
        num_hidden_layers=config.depth,
        num_attention_heads=config.num_heads,
        intermediate_size=config.mlp_dim,
        image_size=square_size(config),
        patch_size=config.patch_size,
        num_channels=config.in_channels,
        num_labels=config.num_classes,
        layer_norm_eps=config.norm_eps,
        attn_implementation=attn_implementation,
    )
    return LogitsOnly(ViTForImageClassification(hf_config))


def build_torchvision(config: ViTConfig) -> nn.Module:
    from torchvision.models.vision_transformer import VisionTransformer as TorchvisionViT

    if config.in_channels != 3:
        raise ValueError(f"torchvision's ViT takes 3 input channels, got {config.in_channels}")
    return TorchvisionViT(
        image_size=square_size(config),
        patch_size=config.patch_size,
        num_layers=config.depth,
        num_heads=config.num_heads,
        hidden_dim=config.dim,
        mlp_dim=config.mlp_dim,
        num_classes=config.num_classes,
    )


def build_onnxruntime(config: ViTConfig, quantization: str | None = None) -> nn.Module:
    from vitlab.export import OnnxModel, export_onnx, quantize_onnx

    model = VisionTransformer(config).eval()
    with tempfile.TemporaryDirectory() as folder:  # the session holds the graph once it is built
        path = Path(folder) / "model.onnx"
        export_onnx(model, path)
        if quantization is not None:
            path, _ = quantize_onnx(model, path, quantization)
        return OnnxModel(path, threads=torch.get_num_threads())


ONNXRUNTIME = ("onnxruntime", "onnxruntime-int8")  # not PyTorch modules: fp32 inference, eager mode, CPU only
OPENVINO = "openvino"
RUNTIMES = (*ONNXRUNTIME, OPENVINO)  # inference runtimes of their own: one mode, "eager"; CPU only
OWN_TARGETS = (OPENVINO,)  # held to their own targets (targets.OPENVINO_TARGETS), never the best peer
FAST_DTYPES = {"vitlab-int8": torch.int8}  # what an implementation's fast path computes in, where not the case's dtype
OTHER_NUMERICS = ("onnxruntime-int8", *FAST_DTYPES)  # shown, never the best peer of a case

IMPLEMENTATIONS: dict[str, Callable[[ViTConfig], nn.Module]] = {
    "vitlab": build_vitlab,
    "vitlab-int8": build_vitlab,
    "timm": build_timm,
    "hf-eager": partial(build_transformers, attn_implementation="eager"),
    "hf-sdpa": partial(build_transformers, attn_implementation="sdpa"),
    "torchvision": build_torchvision,
    "onnxruntime": build_onnxruntime,
    "onnxruntime-int8": partial(build_onnxruntime, quantization="int8"),
    "openvino": build_openvino,
}


def build(name: str, config: ViTConfig | BiTConfig) -> nn.Module:
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {name!r}; choose from {', '.join(IMPLEMENTATIONS)}")
    if not isinstance(config, ViTConfig):  # every builder, vitlab's too, builds a VisionTransformer
        raise ValueError(f"{config.name or 'a BiT ResNet'}: the benchmark compares ViTs only")
    return IMPLEMENTATIONS[name](config)
