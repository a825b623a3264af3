"""`data-scaling`: ViT against a BiT ResNet and a hybrid of about the same compute, trained on
growing fractions of the training set (paper Sec. 4.2-4.3, Fig. 3 and Fig. 4).

The paper's finding: with little data the ResNets' convolutional inductive bias wins; ViT
overfits more and overtakes them only once the data are large (ImageNet-21k, JFT-300M). Here each
model trains from scratch for the same number of steps on nested class-balanced subsets.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from vitlab.model import BiTConfig, ViTConfig

from .runner import (
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
from .wording import trend

FRACTIONS = (0.1, 0.25, 0.5, 1.0)


def run(settings: Settings) -> Results:
    models: dict[str, ViTConfig | BiTConfig] = {
        "ViT": vit_config(settings),
        "BiT": bit_config(settings),
        "hybrid": hybrid_config(settings),
    }
    steps = steps_of(settings, EXPERIMENT)
    rows = []
    for fraction in settings.fractions or FRACTIONS:
        for label, architecture in models.items():
            for seed in seeds_of(settings, EXPERIMENT):
                result = train_run(
                    settings,
                    f"{label}-{fraction:g}-seed{seed}",
                    seed=seed,
                    steps=steps,
                    architecture=architecture,
                    train_fraction=fraction,
                )
                rows.append(
                    summary_row(result, ("train_images", "val_top1"), model=label, fraction=fraction, seed=seed)
                )
    results = Results(
        rows,
        group_by=("model", "fraction", "train_images"),
        metrics=("val_top1",),
        models={label: describe_model(config) for label, config in models.items()},
    )
    results.findings = findings(results.summary())
    return results


def findings(summary: list[dict[str, Any]]) -> list[str]:
    """Which family wins at the smallest and the largest training set, and how ViT's gap moves."""
    accuracy = {(e["model"], e["fraction"]): e["val_top1"] for e in summary}
    fractions = sorted({e["fraction"] for e in summary})
    images = {e["fraction"]: e["train_images"] for e in summary}
    lines = []
    for fraction in dict.fromkeys((fractions[0], fractions[-1])):
        scores = {model: accuracy[model, f] for model, f in accuracy if f == fraction}
        best = max(scores, key=lambda model: scores[model])
        listed = ", ".join(f"{model} {100 * value:.1f}%" for model, value in scores.items())
        lines.append(f"With {images[fraction]} training images ({fraction:g} of the data) {best} is best: {listed}.")
    if len(fractions) > 1:
        # ViT minus the better convolutional model at every size; its direction from the numbers.
        gaps = [accuracy["ViT", f] - max(accuracy["BiT", f], accuracy["hybrid", f]) for f in fractions]
        listed = ", ".join(f"{100 * gap:+.1f} at {images[f]}" for gap, f in zip(gaps, fractions))
        moves = trend(gaps)
        paper = {
            "grows": "ViT gains on the convolutional models as the data grow, the paper's direction",
            "shrinks": "ViT falls further behind as the data grow, against the paper's direction",
        }.get(moves, "no one direction with the data")
        lines.append(
            f"ViT minus the better convolutional model, in points by training images: {listed}; "
            f"from each size to the next it {moves}: {paper}."
        )
    return lines


EXPERIMENT = Experiment(
    name="data-scaling",
    reproduces="Figs. 3-4 (ViT vs BiT ResNet vs hybrid as the training set grows)",
    question="Does the ResNet win on small data and ViT catch up as the training set grows?",
    steps=300,
    seeds=(0,),
    run=run,
    columns=("model", "fraction", "train_images", "val_top1"),
    plot=partial(plot_lines, series="model", x="train_images", xlabel="training images"),  # as Fig. 3
    options=("fractions",),
)
