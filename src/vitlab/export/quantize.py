"""int8 ONNX for CPUs without bf16: onnxruntime's dynamic quantization of the encoder's linear layers.

`quantize_dynamic` stores the weights of the MatMul nodes that have a weight (an initializer) as
second input as int8, one scale per output channel, and quantizes their float inputs to uint8 at
run time (DynamicQuantizeLinear), so each becomes a MatMulInteger whose int32 result is scaled back
to float. Those are the qkv, output and MLP projections of every block, nearly all of a ViT's
FLOPs. Float stay: attention's q k^T and attn v (two activations), the patch-embedding Conv (raw
pixels in), the head (a Gemm on the class token: 1/T of the encoder's rows, and the logits the
accuracy is read from), LayerNorm, softmax and GELU. No calibration data is needed.

The weights use 7 of their 8 bits (reduce_range; onnxruntime's documentation: it may help accuracy
on machines without VNNI, more so per channel). On the digits demo model (`vitlab.bench.int8_accuracy`,
recorded by `make bench-int8` in docs/benchmarks.md) these settings and onnxruntime's plain ones
(per tensor, full range, head quantized) differ by two of 360 images, in either direction
depending on the thread count the model was trained with: too small a model to rank them.

Tried and not adopted: onnxruntime's transformer optimizer (onnxruntime.transformers, model_type
"vit") fused LayerNorm and GELU but no attention, and ran slower in fp32 and int8. The session already
optimises the graph fully (ORT_ENABLE_ALL) and the benchmark gives it torch's thread count. Static
(calibrated, QDQ) quantization was not tried: dynamic needs no data and met the accuracy bound.

int8 does not reproduce float32 logits to 1e-4; its check accepts differences up to
INT8_TOLERANCE of the largest PyTorch logit on the sample images and reports how often the top
class agrees. The accuracy cost on real data is measured with `vitlab eval --runtime onnx`.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import torch

from vitlab.model import BiTResNet, VisionTransformer

from .metadata import INPUT_NAME, OUTPUT_NAME, metadata_strings
from .onnx import export_onnx, onnx_session
from .validate import CHECK_BATCH_SIZES, TracePlan, Validation, compare, has_zero_head, with_random_head

Quantization = Literal["int8"]
QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)


@dataclass(frozen=True)
class Int8Settings:
    """What quantize_dynamic is asked to do; the defaults are vitlab's."""

    op_types: tuple[str, ...] = ("MatMul",)  # the encoder's linear layers; Conv, the head's Gemm stay float
    per_channel: bool = True  # one weight scale per output channel
    reduce_range: bool = True  # 7-bit weights (see the module docstring)


INT8_SETTINGS = Int8Settings()
INT8_TOLERANCE = 0.1  # max |logit difference| / max |PyTorch logit| accepted for int8
INT8_CHECK_BATCH_SIZES = (*CHECK_BATCH_SIZES, 12)  # more images than the fp32 check: top-1 agreement is a rate


def quantized_path(path: str | Path, quantization: str) -> Path:
    """Where the quantized copy of the ONNX file `path` goes: model.onnx -> model.int8.onnx."""
    path = Path(path)
    return path.with_name(f"{path.stem}.{quantization}{path.suffix or '.onnx'}")


class _QuantizerNotes(logging.Filter):
    """The quantizer logs on the root logger, at INFO and WARNING, every MatMul it leaves float (attention's
    activation products, by design) and a hint to run shape inference first (the dynamo exporter's graphs carry
    their shapes); none of it is news to a vitlab user. Errors still pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


def export_quantized(
    model: VisionTransformer | BiTResNet,
    source: str | Path,
    quantization: str = "int8",
    plan: TracePlan = TracePlan(),
    tolerance: float = INT8_TOLERANCE,
    out: str | Path | None = None,
) -> tuple[Path, Validation]:
    """`quantize_onnx` (to `out`, by default quantized_path(source)), with a zero head checked as
    export_model checks it: the logits of a zero head are 0 for every input, so a copy with a random
    head is exported, quantized and checked instead."""
    if not has_zero_head(model):
        return quantize_onnx(model, source, quantization, out, plan=plan, tolerance=tolerance)
    written, _ = quantize_onnx(model, source, quantization, out, plan=plan, tolerance=tolerance)
    probe = with_random_head(model)
    with tempfile.TemporaryDirectory() as folder:
        export_onnx(probe, Path(folder) / "probe.onnx", plan)
        _, check = quantize_onnx(probe, Path(folder) / "probe.onnx", quantization, plan=plan, tolerance=tolerance)
    note = "the head is zero, so the model's logits are all 0; checked on a copy with a random head instead"
    return written, replace(check, note=note)


def quantize_onnx(
    model: VisionTransformer | BiTResNet,
    source: str | Path,
    quantization: str = "int8",
    out: str | Path | None = None,
    plan: TracePlan = TracePlan(),
    tolerance: float = INT8_TOLERANCE,
    settings: Int8Settings = INT8_SETTINGS,
) -> tuple[Path, Validation]:
    """Quantize the fp32 ONNX file `source` exported from `model`; check the result against `model`."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {quantization!r}; choose one of {', '.join(QUANTIZATIONS)}")
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    written = Path(out) if out is not None else quantized_path(source, quantization)
    # Dynamic quantization rewrites every Gemm as a MatMul (named NODE_MatMul) before it picks nodes by
    # op type, so a Gemm to keep float is excluded by that name.
    gemms = [node.name for node in onnx.load(source, load_external_data=False).graph.node if node.op_type == "Gemm"]
    excluded = [] if "Gemm" in settings.op_types else [f"{name}_MatMul" for name in gemms]
    hint = _QuantizerNotes()
    logging.getLogger().addFilter(hint)
    try:
        quantize_dynamic(
            source,
            written,
            op_types_to_quantize=list(settings.op_types),
            weight_type=QuantType.QInt8,
            per_channel=settings.per_channel,
            reduce_range=settings.reduce_range,
            nodes_to_exclude=excluded,
        )
    finally:
        logging.getLogger().removeFilter(hint)
    # The quantizer copies metadata_props today; set them again so the file is usable alone whatever it does.
    graph = onnx.load(written)
    kept = {prop.key: prop.value for prop in graph.metadata_props}
    onnx.helper.set_model_props(graph, {**kept, **metadata_strings(model.config), "quantization": quantization})
    onnx.save(graph, written)

    session = onnx_session(written)

    def run(images: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(session.run([OUTPUT_NAME], {INPUT_NAME: images.numpy().astype(np.float32)})[0])

    config = model.config
    batches = INT8_CHECK_BATCH_SIZES if plan.dynamic_batch else (plan.batch_size,)
    check = compare(
        model.float().eval(),
        run,
        config.in_channels,
        config.image_size,
        batches,
        str(written),
        tolerance,
        relative=True,
    )
    return written, check
