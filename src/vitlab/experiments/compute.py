"""`compute`: accuracy against total training compute for ViT, a BiT ResNet and a hybrid (paper
Sec. 4.4, Fig. 5).

The paper's finding: "Vision Transformers dominate ResNets on the performance/compute trade-off. ViT
uses approximately 2-4x less compute to attain the same performance (average over 5 datasets).
Second, hybrids slightly outperform ViT at small computational budgets, but the difference vanishes
for larger models." Here each family (the experiments' three models of about equal FLOPs per image)
trains from scratch on the whole training set at several step budgets; each run is one point.

Compute of a run, counted, never timed: forward FLOPs per image (vitlab.bench.flops.model_flops, the
full model at the run's input size) x 3 x images seen (steps x batch). The factor 3 is forward +
backward: the backward pass costs about twice the forward, as every product y = x W needs one product
for the gradient of x and one for that of W (the 2N + 4N = 6N FLOPs per token of Kaplan et al. 2020,
"Scaling Laws for Neural Language Models", Sec. 2.1). The models table lists each model's counted
forward + backward FLOPs over its forward FLOPs (model_flops(train=True)), the factor's check.

The largest budget is data-scaling's step budget, and its runs go to data-scaling's folders
(DIR/runs/MODEL-1-SEED, the whole training set): a run data-scaling finished there is reused, not
retrained, and the other way round.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import yaml

from vitlab.bench.flops import model_flops
from vitlab.model import BiTConfig, ViTConfig
from vitlab.training import get_recipe

from . import data_scaling
from .runner import (
    RUNS,
    Experiment,
    Results,
    Settings,
    bit_config,
    describe_model,
    hybrid_config,
    plot_lines,
    seeds_of,
    steps_of,
    summary_row,
    train_run,
    vit_config,
)
from .wording import compare

BACKWARD_FACTOR = 3  # forward + backward = 3 x forward (see the docstring)
BUDGET_FRACTIONS = (0.1, 1 / 3, 1.0)  # of the largest budget: about a decade of compute per family


def budgets(steps: int) -> tuple[int, ...]:
    """Step budgets: the fractions of `steps`, at least one step each, without repeats."""
    return tuple(dict.fromkeys(max(1, round(fraction * steps)) for fraction in BUDGET_FRACTIONS))


def training_flops(forward_flops: int, steps: int, batch_size: int) -> int:
    """Total training compute of a run: forward FLOPs per image x 3 x the images it saw."""
    return forward_flops * BACKWARD_FACTOR * steps * batch_size


def planned_steps(folder: Path) -> int | None:
    """The step budget of the run in `folder` (its run.yaml), or None when it holds none."""
    path = folder / "run.yaml"
    if not path.is_file():
        return None
    return int(yaml.safe_load(path.read_text())["schedule"]["steps"])


def run_tag(settings: Settings, label: str, steps: int, seed: int) -> str:
    """data-scaling's folder for this model and seed when it holds (or will hold) a run of `steps`."""
    shared = f"{label}-{1.0:g}-seed{seed}"  # data-scaling's tag for the whole training set
    planned = planned_steps(settings.out / RUNS / shared)
    if planned == steps or (planned is None and steps == steps_of(settings, data_scaling.EXPERIMENT)):
        return shared
    return f"{label}-steps{steps}-seed{seed}"


def run(settings: Settings) -> Results:
    models: dict[str, ViTConfig | BiTConfig] = {
        "ViT": vit_config(settings),
        "BiT": bit_config(settings),
        "hybrid": hybrid_config(settings),
    }
    batch_size = get_recipe("demo").data.batch_size  # train_run's recipe
    rows = []
    for label, architecture in models.items():
        forward = model_flops(architecture.replace(num_classes=10))
        for steps in budgets(steps_of(settings, EXPERIMENT)):
            for seed in seeds_of(settings, EXPERIMENT):
                tag = run_tag(settings, label, steps, seed)
                result = train_run(settings, tag, seed=seed, steps=steps, architecture=architecture)
                flops = training_flops(forward, steps, batch_size)
                rows.append(
                    summary_row(
                        result,
                        ("val_top1",),
                        model=label,
                        steps=steps,
                        images_seen=steps * batch_size,
                        train_tflops=flops / 1e12,
                        seed=seed,
                    )
                )
    described = {}
    for label, config in models.items():
        sized = config.replace(num_classes=10)
        described[label] = {
            **describe_model(config),
            "counted_backward_factor": round(model_flops(sized, train=True) / model_flops(sized), 2),
        }
    results = Results(
        rows,
        group_by=("model", "steps", "images_seen", "train_tflops"),
        metrics=("val_top1",),
        models=described,
        extra={"flops": f"forward FLOPs per image x {BACKWARD_FACTOR} x steps x batch {batch_size}"},
    )
    results.findings = findings(results.summary())
    return results


def least_compute(entries: list[dict[str, Any]], accuracy: float) -> float | None:
    """The smallest compute among `entries` reaching `accuracy` (mean over seeds), or None."""
    reaching = [e["train_tflops"] for e in entries if e["val_top1"] >= accuracy]
    return min(reaching) if reaching else None


def findings(summary: list[dict[str, Any]]) -> list[str]:
    """The compute ViT and BiT each need to reach the same accuracy, and the hybrid against ViT at the
    smallest and the largest budget."""
    family = {label: [e for e in summary if e["model"] == label] for label in ("ViT", "BiT", "hybrid")}
    lines = []
    target = min(max(e["val_top1"] for e in family["ViT"]), max(e["val_top1"] for e in family["BiT"]))
    vit, bit = least_compute(family["ViT"], target), least_compute(family["BiT"], target)
    assert vit is not None and bit is not None  # each family reaches the lower of the two bests
    ratio = bit / vit
    verdict = (
        "less compute than BiT, the paper's direction (2-4x less)"
        if ratio > 1
        else "the same compute as BiT: not the paper's 2-4x saving"
        if ratio == 1
        else "more compute than BiT, against the paper's direction"
    )
    lines.append(
        f"To reach {100 * target:.1f}% (the lower of the two families' best), ViT needed {vit:.3g} TFLOPs "
        f"and BiT {bit:.3g}: ViT used {max(ratio, 1 / ratio):.2g}x {verdict} (the budgets are about 3x apart, "
        "so the ratio is known to that grid)."
    )
    for position, word in ((0, "smallest"), (-1, "largest")):
        hybrid, plain = family["hybrid"][position], family["ViT"][position]
        spread = max(hybrid["val_top1_std"], plain["val_top1_std"])
        lines.append(
            f"At the {word} budget ({hybrid['steps']} steps; hybrid {hybrid['train_tflops']:.3g}, ViT "
            f"{plain['train_tflops']:.3g} TFLOPs) the hybrid's {100 * hybrid['val_top1']:.1f}% is "
            f"{compare(hybrid['val_top1'], plain['val_top1'])} ViT's {100 * plain['val_top1']:.1f}%"
            + (" (within the spread over seeds)" if abs(hybrid["val_top1"] - plain["val_top1"]) <= spread else "")
            + ("; the paper: hybrids better at small compute." if position == 0 else ".")
        )
    return lines


EXPERIMENT = Experiment(
    name="compute",
    reproduces="Fig. 5 (accuracy against pre-training compute: ViT, BiT ResNet, hybrid)",
    question="Does ViT reach a given accuracy with less training compute than the ResNet, and the hybrid "
    "beat ViT at small compute?",
    steps=data_scaling.EXPERIMENT.steps,  # the largest budget; its runs are data-scaling's
    seeds=(0, 1),
    run=run,
    columns=("model", "steps", "train_tflops", "val_top1"),
    plot=partial(plot_lines, series="model", x="train_tflops", xlabel="total training compute (TFLOPs)"),
)
