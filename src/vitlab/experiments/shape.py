"""`shape`: from one base ViT, depth, width, MLP width and patch size scaled one at a time; accuracy
against forward FLOPs, one line per axis, all through the base (paper Appendix D.2, Fig. 8).

The paper (D.2), from a base of 8 layers, D 1024, D_MLP 2048 and patch 32: "scaling the depth
results in the biggest improvements ... Interestingly, scaling the width of the network seems to
result in the smallest changes. Decreasing the patch size and thus increasing the effective sequence
length shows surprisingly robust improvements without introducing parameters."

Here the base is a small ViT at the same proportions (MLP = 2 x width) for 16 px digits: 2 layers,
width 32, MLP 64, patch 8 (a 2x2 grid), head width 16, class token. Each axis doubles twice: depth
4, 8; width 64, 128 (heads grow with it); MLP 128, 256; patch 4, 2. Every model trains with the same
recipe, steps and seeds. Which axis pays most is read as accuracy gained per doubling of forward
FLOPs from the base to the axis's last point.
"""

from __future__ import annotations

import math
from typing import Any

from matplotlib.axes import Axes

from vitlab.model import ViTConfig, config_for

from .runner import Experiment, Results, Settings, describe_model, seeds_of, steps_of, train_run
from .wording import trend

HEAD_DIM = 16
BASE = {"depth": 2, "dim": 32, "mlp_dim": 64, "patch_size": 8}
AXES = {  # Fig. 8's lines: the field each scales and its values beyond the base
    "depth": ("depth", (4, 8)),
    "width": ("dim", (64, 128)),
    "MLP": ("mlp_dim", (128, 256)),
    "patch size": ("patch_size", (4, 2)),
}
PAPER = {"most": "depth", "least": "width"}  # D.2: depth the biggest improvements, width the smallest
PAPER_WORDS = (
    "Fig. 8 (D.2): scaling the depth gives the biggest improvements, the width the smallest; smaller "
    "patches give robust improvements without adding parameters."
)


def shape_config(settings: Settings, **changes: int) -> ViTConfig:
    fields = {**BASE, **changes}
    if settings.image_size % fields["patch_size"]:
        raise ValueError(f"--image-size {settings.image_size} is not a multiple of patch size {fields['patch_size']}")
    config = config_for(
        f"Ti/{fields['patch_size']}",
        image_size=settings.image_size,
        depth=fields["depth"],
        dim=fields["dim"],
        mlp_dim=fields["mlp_dim"],
        num_heads=fields["dim"] // HEAD_DIM,
    )
    assert isinstance(config, ViTConfig)  # a "Ti/P" name
    return config.replace(name=shape_name(fields))


def shape_name(fields: dict[str, int]) -> str:
    return f"L{fields['depth']}-D{fields['dim']}-MLP{fields['mlp_dim']}/{fields['patch_size']}"


def run(settings: Settings) -> Results:
    points: list[tuple[str, dict[str, int]]] = [("base", {})]
    points += [(axis, {field: value}) for axis, (field, values) in AXES.items() for value in values]
    steps = steps_of(settings, EXPERIMENT)
    rows, models = [], {}
    for axis, changes in points:
        config = shape_config(settings, **changes)
        name = config.name or ""
        models[name] = describe_model(config)
        for seed in seeds_of(settings, EXPERIMENT):
            result = train_run(
                settings, f"shape-{name.replace('/', '-P')}-seed{seed}", seed=seed, steps=steps, architecture=config
            )
            rows.append(
                {
                    "axis": axis,
                    "shape": name,
                    "mflops": models[name]["mflops"],
                    "params": models[name]["params"],
                    "seed": seed,
                    "val_top1": result.summary["val_top1"],
                }
            )
    results = Results(
        rows,
        group_by=("axis", "shape", "mflops", "params"),
        metrics=("val_top1",),
        models=models,
        extra={"base": BASE, "paper": PAPER_WORDS},
    )
    results.findings = [f"The paper: {PAPER_WORDS}", *findings(results.summary())]
    return results


def series(summary: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each axis's points, the base first (Fig. 8: the intersection of all lines)."""
    base = [e for e in summary if e["axis"] == "base"]
    return {axis: base + [e for e in summary if e["axis"] == axis] for axis in AXES}


def findings(summary: list[dict[str, Any]]) -> list[str]:
    """Accuracy gained per doubling of FLOPs along each axis, the ranking, and the paper's two claims."""
    gains = {}
    lines = []
    for axis, entries in series(summary).items():
        first, last = entries[0], entries[-1]
        doublings = math.log2(last["mflops"] / first["mflops"])
        gains[axis] = (last["val_top1"] - first["val_top1"]) / doublings if doublings > 0 else 0.0
        lines.append(
            f"{axis}: {100 * first['val_top1']:.1f}% -> {100 * last['val_top1']:.1f}% over {doublings:.2f} doublings "
            f"of the FLOPs ({first['mflops']:g} -> {last['mflops']:g} MFLOPs), {100 * gains[axis]:+.1f} points per doubling."
        )
    ranked = sorted(gains, key=lambda axis: gains[axis], reverse=True)
    lines.append(
        "Points per doubling of FLOPs, most first: " + ", ".join(f"{a} {100 * gains[a]:+.1f}" for a in ranked) + "."
    )
    for rank, axis in (("most", ranked[0]), ("least", ranked[-1])):
        held = axis == PAPER[rank]
        lines.append(f"{axis} pays {rank} here; the paper: {PAPER[rank]} ({'held' if held else 'did not hold'}).")
    patch = trend([e["val_top1"] for e in series(summary)["patch size"]])
    lines.append(
        f"Smaller patches: accuracy {patch} from each patch size to the next; the paper: robust improvements "
        f"({'held' if patch == 'grows' else 'did not hold'})."
    )
    return lines


def plot(axes: Axes, summary: list[dict[str, Any]]) -> None:
    """Val top-1 against forward FLOPs, one line with seed error bars per axis, all through the base."""
    for axis, entries in series(summary).items():
        axes.errorbar(
            [e["mflops"] for e in entries],
            [100 * e["val_top1"] for e in entries],
            yerr=[100 * e["val_top1_std"] for e in entries],
            marker="o",
            capsize=3,
            label=axis,
        )
    axes.set_xscale("log")
    axes.set_xlabel("forward MFLOPs / image")
    axes.set_ylabel("val top-1 (%)")
    axes.legend()


EXPERIMENT = Experiment(
    name="shape",
    reproduces="Fig. 8 (scaling depth, width, MLP and patch size one at a time)",
    question="Which of depth, width, MLP width and patch size buys the most accuracy per FLOP?",
    steps=300,
    seeds=(0, 1),
    run=run,
    columns=("axis", "shape", "mflops", "params", "val_top1"),
    plot=plot,
)
