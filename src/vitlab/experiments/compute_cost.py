"""`compute-cost`: inference speed and the largest batch that fits a memory budget, across input sizes
(paper Appendix D.5, Fig. 12). No training.

The paper timed inference on a TPUv3 core and found ViT models of speed comparable to similar
ResNets, and large ViT models fitting larger per-core batches than ResNets ("more memory-efficient").
Here every model runs fp32 inference on this CPU, measured as `vitlab bench` measures it: the bench's
step (bench/steps.py, eager mode), its warm-up and interleaved timed rounds (bench/timing.py
median_seconds, the median over rounds; at each input size every model runs once per round), and its peak memory of one step
(bench/memory.py: the most tensor memory alive at once above what was alive before, the input batch
not counted). Throughput is per core: images/s over the torch threads it ran on (one per core).

The largest batch: doubling from 1 until a batch's peak exceeds --memory-budget-mib, then bisection of
the bracket (largest fitting, smallest not), each probe where the line through the bracket's two
peaks crosses the budget (the peak is nearly affine in the batch) or at the midpoint when that line
did not halve the bracket. A batch whose estimated memory (vitlab.memory.budget) exceeds the memory
available is counted as not fitting without allocating it. The search's time grows with the budget
(each batch found doubles with it); the default, 128 MiB, keeps the default run to a few minutes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from matplotlib.axes import Axes

from vitlab.accel.cpu import cpu_model
from vitlab.bench.flops import model_flops
from vitlab.bench.harness import BenchConfig
from vitlab.bench.machine import cpu_name, cpu_text, load_average
from vitlab.bench.memory import step_peak_bytes
from vitlab.bench.steps import Case, Mode, make_step
from vitlab.bench.timing import median_seconds
from vitlab.memory.budget import available_memory, memory_needed
from vitlab.model import BiTConfig, ViTConfig, config_for, create_untrained

from .runner import Experiment, Results, Settings, describe_model
from .wording import compare

log = logging.getLogger("vitlab")

# Default: Fig. 12's ViTs and ResNets that run in minutes on one CPU core; larger ones (L/16, BiT-R101x1,
# ...) by --models.
MODELS = ("Ti/16", "S/16", "B/16", "BiT-R26x1", "BiT-R50x1")
SIZES = (224, 320, 448)
THROUGHPUT_BATCH = 4  # images per timed inference call
DTYPE = "fp32"
BENCH = BenchConfig(cases=[])  # the bench's warm-up calls and shortest timed sample
MAX_BATCH = 1 << 14  # doubling stops here: a budget this loose says nothing more
# Pairs the findings compare: a ViT and the ResNet of about its inference FLOPs (Ti/16 1.3 GMACs and
# R26 2.3, S/16 4.6 and R50 4.1, B/16 17.6 at 224 px), listed by forward FLOPs in the report.
PAIRS = (("Ti/16", "BiT-R26x1"), ("S/16", "BiT-R50x1"), ("S/16", "BiT-R26x1"), ("B/16", "BiT-R50x1"))


def largest_batch(peak: Callable[[int], int | None], budget: int, ceiling: int = MAX_BATCH) -> tuple[int, dict]:
    """The largest batch b with peak(b) <= budget (0 if none), and every probe's peak by batch.

    peak(b) is None for a batch not worth allocating (counted as not fitting)."""
    probes: dict[int, int | None] = {}

    def fits(batch: int) -> bool:
        probes[batch] = peak(batch)
        value = probes[batch]
        return value is not None and value <= budget

    if not fits(1):
        return 0, probes
    low, high = 1, 2
    while fits(high):  # doubling
        if high >= ceiling:
            log.warning("largest batch: %d still fits the budget; stopped there", high)
            return high, probes
        low, high = high, min(2 * high, ceiling)
    halve = False
    while high - low > 1:  # bisection: low fits, high does not
        guess = (low + high) // 2
        low_peak, high_peak = probes[low], probes[high]
        if not halve and low_peak is not None and high_peak is not None and high_peak > low_peak:
            crossing = low + (budget - low_peak) * (high - low) / (high_peak - low_peak)
            guess = min(max(int(crossing), low + 1), high - 1)
        width = high - low
        if fits(guess):
            low = guess
        else:
            high = guess
        halve = not halve and high - low > width / 2  # the line missed: halve once
    return low, probes


def inference_case(name: str, size: int, batch: int) -> Case:
    return Case(name, size, batch, DTYPE, "infer")


def measure_peak(name: str, config: ViTConfig | BiTConfig, model: torch.nn.Module, size: int, batch: int) -> int | None:
    """Peak bytes of one inference step at `batch`, or None (nothing allocated) when the estimate exceeds
    the memory available."""
    if memory_needed(config, batch) > available_memory():
        return None
    device = torch.device("cpu")
    step = make_step(model, inference_case(name, size, batch), Mode(), device, config.num_classes)
    return step_peak_bytes(step, device)


def run(settings: Settings) -> Results:
    names, sizes = settings.models or MODELS, settings.input_sizes or SIZES
    budget = int(settings.memory_budget_mib * 2**20)
    if 2 * budget > available_memory():  # doubling may probe twice the budget
        raise ValueError(
            f"--memory-budget-mib {settings.memory_budget_mib:g}: twice it must fit the "
            f"{available_memory() / 2**20:.0f} MiB of memory available"
        )
    device, threads = torch.device("cpu"), torch.get_num_threads()
    rows, models = [], {}
    for size in sizes:
        configs = {name: config_for(name, image_size=size) for name in names}
        built = {name: create_untrained(config).eval() for name, config in configs.items()}
        steps = {
            name: make_step(model, inference_case(name, size, THROUGHPUT_BATCH), Mode(), device, 1000)
            for name, model in built.items()
        }
        seconds = median_seconds(steps, device, settings.rounds, BENCH.warmup, BENCH.min_sample_s)
        for name, config in configs.items():
            found, probes = largest_batch(partial(measure_peak, name, config, built[name], size), budget)
            per_image = seconds[name] / THROUGHPUT_BATCH
            row = {
                "model": name,
                "image_size": size,
                "images_per_s_per_core": round(1 / per_image / threads, 2),
                "max_batch": found,
                "peak_mib_at_max": round(probes[found] / 2**20, 1) if found else None,
                "gflops": round(model_flops(config) / 1e9, 2),
                "probes": {str(b): p for b, p in sorted(probes.items())},
                "seed": 0,
            }
            rows.append(row)
            log.info("%s @ %d px: %.2f images/s per core, largest batch %d", name, size, 1 / per_image / threads, found)
        if size == sizes[0]:
            models = {name: describe_model(config) for name, config in configs.items()}
    measured = {
        "cpu": cpu_name(),
        "cpu_model": cpu_model(),  # family and model: CPUs of one name differ
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": threads,
        "dtype": DTYPE,
        "throughput_batch": THROUGHPUT_BATCH,
        "rounds": settings.rounds,
        "memory_budget_mib": settings.memory_budget_mib,
        "load_average": load_average(),
    }
    results = Results(
        rows,
        group_by=("model", "image_size", "images_per_s_per_core", "max_batch", "peak_mib_at_max", "gflops"),
        metrics=(),
        models=models,
        extra={"measured": measured},
    )
    results.findings = [measured_on(measured), *findings(results.summary())]
    return results


def measured_on(measured: dict[str, Any]) -> str:
    return (
        f"Measured on {cpu_text(measured)}, CPU capability {measured['cpu_capability']}, {measured['threads']} "
        f"thread(s), {measured['dtype']} inference, throughput at batch {measured['throughput_batch']} "
        f"(median of {measured['rounds']} rounds), memory budget {measured['memory_budget_mib']:g} MiB; "
        f"load average {measured['load_average']}."
    )


def findings(summary: list[dict[str, Any]]) -> list[str]:
    """For each ViT / ResNet pair measured: the speed ratio and the batch ratio at each size."""
    table = {(e["model"], e["image_size"]): e for e in summary}
    names = {e["model"] for e in summary}
    lines = []
    for vit, resnet in PAIRS:
        if vit not in names or resnet not in names:
            continue
        sizes = sorted(size for model, size in table if model == vit and (resnet, size) in table)
        speed = [table[vit, s]["images_per_s_per_core"] / table[resnet, s]["images_per_s_per_core"] for s in sizes]
        batch = [table[vit, s]["max_batch"] / max(table[resnet, s]["max_batch"], 1) for s in sizes]
        comparable = all(0.5 <= r <= 2 for r in speed)
        lines.append(
            f"{vit} over {resnet}, images/s per core: "
            + ", ".join(f"{r:.2f}x at {s} px" for r, s in zip(speed, sizes))
            + (
                " (within a factor 2 at every size: comparable speed, as the paper found)"
                if comparable
                else " (not within a factor 2 at every size: not the paper's comparable speed)"
            )
            + "; largest batch: "
            + ", ".join(f"{r:.2f}x at {s} px" for r, s in zip(batch, sizes))
            + f" ({larger_batch(batch)})."
        )
    return lines


def larger_batch(ratios: list[float]) -> str:
    """Which model fits the larger batch, from the ViT-over-ResNet ratios at each size."""
    relations = {compare(ratio, 1.0) for ratio in ratios}
    if relations == {"above"}:
        return "the ViT fits the larger batch at every size, as the paper's large ViTs do"
    if relations == {"below"}:
        return "the ResNet fits the larger batch at every size, against the paper's finding for large ViTs"
    return "neither fits the larger batch at every size"


def plot_lines(axes: Axes, summary: list[dict[str, Any]], key: str, ylabel: str) -> None:
    for name in dict.fromkeys(e["model"] for e in summary):
        entries = [e for e in summary if e["model"] == name]
        axes.plot([e["image_size"] for e in entries], [e[key] for e in entries], marker="o", label=name)
    axes.set_yscale("log")
    axes.set_xlabel("input size (px)")
    axes.set_ylabel(ylabel)
    axes.legend(fontsize=8)


EXPERIMENT = Experiment(
    name="compute-cost",
    reproduces="Fig. 12 (inference speed and largest batch across input sizes)",
    question="Is ViT inference as fast as a similar ResNet's, and does ViT fit a larger batch in the same memory?",
    steps=0,  # no training
    seeds=(0,),
    run=run,
    columns=("model", "image_size", "gflops", "images_per_s_per_core", "max_batch", "peak_mib_at_max"),
    # Fig. 12's two panels: images/s per core (left) and the largest batch (right) against input size.
    plot=partial(plot_lines, key="images_per_s_per_core", ylabel="inference images/s per core"),
    panels=(partial(plot_lines, key="max_batch", ylabel="largest batch in the memory budget"),),
    options=("models", "input_sizes", "memory_budget_mib", "rounds"),
)
