"""What int8 costs in top-1: a tiny ViT trained on scikit-learn's digits, scored in PyTorch fp32, by
vitlab's int8 path (optimize_for_inference with dtype torch.int8, model/int8.py) and as int8 ONNX,
with vitlab's quantization settings and with onnxruntime's plain ones.

The model trains in seconds to well above chance (10%) on the 360 validation images (its top-1 is
in the bench's report; tests/export/test_quantize.py holds it above 60%), so one image is 0.28 points. The int8 model runs in batches of 64, as `vitlab eval` feeds it: an
activation's int8 scale is taken over its whole batch.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from vitlab.accel.fast import optimize_for_inference
from vitlab.accel.kernels import dtype_name
from vitlab.data.digits import load_digits_splits
from vitlab.evaluate.predict import eval_transform
from vitlab.export import OnnxModel, export_model, quantize_onnx
from vitlab.export.quantize import INT8_SETTINGS, Int8Settings
from vitlab.model import VisionTransformer, ViTConfig

OWN_SETTINGS = {"linears": "encoder blocks'", "weights": "int8 per channel", "activations": "uint8 per tensor, dynamic"}
PLAIN = Int8Settings(op_types=("MatMul", "Gemm"), per_channel=False, reduce_range=False)  # what vitlab used first
EVAL_BATCH = 64
# The trained weights depend on the thread count (reduction order), and so does which int8 setting
# loses an image: trained on 2 threads, vitlab's settings lose 0 points and the plain ones 0.56; on 1
# thread, 0.56 and 0. Two images of 360 is the size of every difference here. Training is pinned to
# 2 threads so that the result does not depend on what ran before.
TRAIN_THREADS = 2


def digits_tensors(config: ViTConfig, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A split of the digits prepared as the model's evaluation transform prepares them."""
    part = getattr(load_digits_splits(eval_transform(config), eval_transform(config)), split)
    pairs = [part[index] for index in range(len(part))]
    return torch.stack([image for image, _ in pairs]), torch.tensor([label for _, label in pairs])


def train_on_digits(steps: int = 80) -> VisionTransformer:
    """A 2-block ViT on 8x8 digits (2x2 patches), AdamW, batches of 64 from the training split."""
    torch.manual_seed(0)
    config = ViTConfig(
        image_size=(8, 8),
        patch_size=2,
        dim=32,
        depth=2,
        num_heads=4,
        mlp_dim=64,
        num_classes=10,
        class_names=[str(d) for d in range(10)],
    )
    model = VisionTransformer(config)
    images, labels = digits_tensors(config, "train")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    threads = torch.get_num_threads()
    torch.set_num_threads(TRAIN_THREADS)
    try:
        for step in range(steps):
            batch = torch.randint(len(labels), (64,), generator=torch.Generator().manual_seed(step))
            loss = F.cross_entropy(model(images[batch]), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval()


def top1(predict, images: torch.Tensor, labels: torch.Tensor) -> float:
    with torch.no_grad():
        classes = torch.cat([predict(batch) for batch in images.split(EVAL_BATCH)]).argmax(1)
    return (classes == labels).float().mean().item()


def int8_accuracy(settings: dict[str, Int8Settings] | None = None) -> dict:
    """Top-1 on the digits validation split: PyTorch fp32, vitlab's int8 path, onnxruntime fp32, and
    onnxruntime int8 per settings."""
    settings = settings or {"vitlab": INT8_SETTINGS, "plain": PLAIN}
    model = train_on_digits()
    images, labels = digits_tensors(model.config, "val")
    scores = {"pytorch fp32": top1(model, images, labels)}
    int8_path = optimize_for_inference(model, dtype=torch.int8)
    own = f"pytorch, rest in {dtype_name(int8_path.dtype)}"
    scores[f"int8 {own}"] = top1(int8_path, images, labels)
    with tempfile.TemporaryDirectory() as folder:
        fp32, _ = export_model(model, "onnx", Path(folder) / "digits.onnx")
        scores["onnxruntime fp32"] = top1(OnnxModel(fp32), images, labels)
        for name, choice in settings.items():
            int8, _ = quantize_onnx(model, fp32, out=Path(folder) / f"{name}.onnx", settings=choice)
            scores[f"int8 {name}"] = top1(OnnxModel(int8), images, labels)
    described = {name: {**asdict(choice), "op_types": list(choice.op_types)} for name, choice in settings.items()}
    described[own] = OWN_SETTINGS
    vitlab = [f"int8 {own}", *(f"int8 {name}" for name in settings if settings[name] == INT8_SETTINGS)]
    return {"images": len(labels), "top1": scores, "settings": described, "vitlab_int8": vitlab}
