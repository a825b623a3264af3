"""`axial`: ViT against Axial-ViT over a sweep of sizes, accuracy against forward FLOPs and against
measured inference time (paper Appendix D.6, Fig. 13).

The paper (D.6): "both Axial-ViT-B/32 and Axial-ViT-B/16 do better than their ViT-B counterpart in
terms of performance, but it comes at the cost of more compute", since each global self-attention
block becomes a row and a column block and "there is a extra MLP per Axial-ViT block". Its remark
on speed, "the naive implementation is extremely slow on TPUs (Figure 13, right)", is about the
Axial ResNet, not about Axial-ViT.

Here each size WIDTHxDEPTH is a pair of models that differ only in their blocks: a ViT and an
Axial-ViT of that width and depth, both pooled by GAP (Axial-ViT has no class token, so the ViT is
given none either), patch 4, MLP 4 x width, head width 16, trained with the same recipe, steps and
seeds. FLOPs are counted (vitlab.bench.flops); inference time is measured on this machine as the
bench measures (vitlab.bench.timing: warm-up, then the median of interleaved rounds), for untrained
copies of the same architectures, at batch TIMING_BATCH in fp32 eager mode on the experiment's
threads; the report records the CPU, its kernel capability and the load average.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from matplotlib.axes import Axes

from vitlab.bench.machine import cpu_text, describe
from vitlab.bench.steps import Mode, inference_step
from vitlab.bench.timing import median_seconds
from vitlab.model import ViTConfig, config_for, create_untrained

from .runner import Experiment, Results, Settings, describe_model, plot_lines, seeds_of, steps_of, train_run
from .wording import compare

SIZES = ("32x2", "64x2", "64x4")
HEAD_DIM = 16
PATCH = 4
TIMING_BATCH = 64
ROUNDS, WARMUP, MIN_SAMPLE_S = 7, 2, 0.2  # the bench's timing: warm-up calls, rounds, seconds per sample
FAMILIES = {"ViT": "", "Axial-ViT": "Axial-"}  # label -> variant prefix
PAPER = (
    "Fig. 13 (D.6): Axial-ViT-B/32 and -B/16 do better than their ViT-B counterparts, at the cost of "
    "more compute (its two panels: FLOPs and inference time); the one it calls extremely slow on TPUs is the "
    "Axial ResNet, not Axial-ViT."
)


def model_config(settings: Settings, family: str, size: str) -> ViTConfig:
    """The ViT or Axial-ViT of `size` ("WIDTHxDEPTH"): patch 4, MLP 4 x width, GAP."""
    width, depth = (int(part) for part in size.split("x"))
    if width % HEAD_DIM:
        raise ValueError(f"--sizes {size}: width {width} is not a multiple of the head width {HEAD_DIM}")
    config = config_for(
        f"{FAMILIES[family]}Ti/{PATCH}",
        image_size=settings.image_size,
        dim=width,
        depth=depth,
        num_heads=width // HEAD_DIM,
        mlp_dim=4 * width,
        pool="gap",
    )
    assert isinstance(config, ViTConfig)  # both families are ViTConfigs
    return config.replace(name=f"{family} {size}/{PATCH}")


def inference_ms(configs: dict[str, ViTConfig]) -> tuple[dict[str, float], dict[str, Any]]:
    """Milliseconds per image of each architecture (untrained weights, eval mode), the bench's way."""
    device = torch.device("cpu")
    images = torch.randn(TIMING_BATCH, 3, *next(iter(configs.values())).image_size, generator=torch.Generator())
    steps = {}
    for label, config in configs.items():
        torch.manual_seed(0)
        steps[label] = inference_step(create_untrained(config.replace(num_classes=10)), images, torch.float32, Mode())
    seconds = median_seconds(steps, device, ROUNDS, WARMUP, MIN_SAMPLE_S)
    timing = {
        "batch": TIMING_BATCH,
        "dtype": "fp32",
        "mode": "eager",
        "rounds": ROUNDS,
        "warmup": WARMUP,
        "min_sample_s": MIN_SAMPLE_S,
        "machine": describe(device),
    }
    return {label: 1e3 * value / TIMING_BATCH for label, value in seconds.items()}, timing


def run(settings: Settings) -> Results:
    sizes = settings.sizes or SIZES
    configs = {f"{family} {size}": model_config(settings, family, size) for size in sizes for family in FAMILIES}
    models = {label: describe_model(config) for label, config in configs.items()}
    milliseconds, timing = inference_ms(configs)  # before training: the machine is as quiet as it gets
    steps = steps_of(settings, EXPERIMENT)
    rows = []
    for label, config in configs.items():
        family, size = label.split(" ")
        for seed in seeds_of(settings, EXPERIMENT):
            tag = f"{FAMILIES[family] or 'ViT-'}{size}-seed{seed}"
            result = train_run(settings, tag, seed=seed, steps=steps, architecture=config)
            rows.append(
                {
                    "family": family,
                    "size": size,
                    "mflops": models[label]["mflops"],
                    "ms_per_image": round(milliseconds[label], 4),
                    "seed": seed,
                    "val_top1": result.summary["val_top1"],
                }
            )
    results = Results(
        rows,
        group_by=("family", "size", "mflops", "ms_per_image"),
        metrics=("val_top1",),
        models=models,
        extra={"timing": timing, "paper": PAPER},
    )
    results.findings = [f"The paper: {PAPER}", *findings(results.summary()), timing_line(timing)]
    return results


def interpolated(x: float, points: list[tuple[float, float]]) -> float | None:
    """ViT's accuracy at `x` on the line through its (x, accuracy) points, linear in log x; None
    outside the points' range (no extrapolation)."""
    xs, ys = zip(*sorted(points))
    if not xs[0] <= x <= xs[-1]:
        return None
    return float(np.interp(np.log(x), np.log(xs), ys))


def findings(summary: list[dict[str, Any]]) -> list[str]:
    """Each pair's accuracy gap with its compute and time ratios, whether the paper's direction held,
    and Axial-ViT against ViT's line at equal FLOPs and at equal time."""
    entry = {(e["family"], e["size"]): e for e in summary}
    sizes = list(dict.fromkeys(e["size"] for e in summary))
    lines, better, costlier = [], 0, 0
    for size in sizes:
        vit, axial = entry["ViT", size], entry["Axial-ViT", size]
        gap = axial["val_top1"] - vit["val_top1"]
        flops, time = axial["mflops"] / vit["mflops"], axial["ms_per_image"] / vit["ms_per_image"]
        better += gap > 0
        costlier += flops > 1 and time > 1
        lines.append(
            f"{size}: Axial-ViT {100 * axial['val_top1']:.1f}% is {compare(axial['val_top1'], vit['val_top1'])} "
            f"ViT {100 * vit['val_top1']:.1f}% ({100 * gap:+.1f} points) at {flops:.2f}x the forward FLOPs "
            f"and {time:.2f}x the inference time per image."
        )
    held = better == len(sizes) and costlier == len(sizes)
    lines.append(
        f"Axial-ViT beats its ViT counterpart at {better} of {len(sizes)} sizes and costs more FLOPs and time at "
        f"{costlier}: the paper's direction (better, at more compute) "
        + ("held at every size." if held else "did not hold at every size.")
    )
    for x, words in (("mflops", "the same forward FLOPs"), ("ms_per_image", "the same inference time")):
        line = [(e[x], e["val_top1"]) for e in summary if e["family"] == "ViT"]
        gaps = []
        for size in sizes:
            axial = entry["Axial-ViT", size]
            expected = interpolated(axial[x], line)
            if expected is not None:
                gaps.append(f"{100 * (axial['val_top1'] - expected):+.1f} at {size}")
        listed = ", ".join(gaps) if gaps else "none of the Axial-ViTs lies within the ViT sizes' range"
        lines.append(f"Axial-ViT minus ViT's line at {words} (log-linear between the ViT sizes), in points: {listed}.")
    return lines


def timing_line(timing: dict[str, Any]) -> str:
    machine = timing["machine"]
    return (
        f"Inference timed on {cpu_text(machine)}, CPU capability {machine['cpu_capability']}, "
        f"{machine['torch_threads']} torch thread(s), batch {timing['batch']}, {timing['dtype']} {timing['mode']}, "
        f"median of {timing['rounds']} interleaved rounds after {timing['warmup']} warm-up calls; "
        f"load average {machine['load_average']}."
    )


def plot_time(axes: Axes, summary: list[dict[str, Any]]) -> None:
    plot_lines(
        axes, summary, series="family", x="ms_per_image", xlabel=f"inference ms / image (batch {TIMING_BATCH}, fp32)"
    )


def plot_flops(axes: Axes, summary: list[dict[str, Any]]) -> None:
    plot_lines(axes, summary, series="family", x="mflops", xlabel="forward MFLOPs / image")


EXPERIMENT = Experiment(
    name="axial",
    reproduces="Fig. 13 (Axial-ViT vs ViT: accuracy against FLOPs and inference time)",
    question="Does Axial-ViT beat the ViT of the same width and depth, and at what cost in FLOPs and in time?",
    steps=300,
    seeds=(0, 1),
    run=run,
    columns=("family", "size", "mflops", "ms_per_image", "val_top1"),
    plot=plot_flops,  # Fig. 13 left
    panels=(plot_time,),  # Fig. 13 right
    options=("sizes",),
)
