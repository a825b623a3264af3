"""`posemb`: the position-embedding ablation of the paper's Table 8 (Appendix D.4).

Five ViTs that differ only in E_pos: none, learned 1-D (the paper's default), learned 2-D (X and Y
embeddings of D/2 each), fixed sine-cosine, and learned relative attention biases. Each is trained
on the data, then measured twice: few-shot linear accuracy of its frozen pre-logits features (the
paper's Table 8 metric, 5-shot on ImageNet there) and the trained classifier's accuracy.
Paper (ViT-B/16, ImageNet 5-shot): none 61.4%, 1-D 64.2%, 2-D 64.0%, relative 64.0%: any E_pos
helps by about 3 points, and which one matters little.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.axes import Axes

from vitlab.data import load_datasets
from vitlab.evaluate import evaluate_representation
from vitlab.evaluate.fewshot import SHOTS
from vitlab.evaluate.predict import eval_transform

from .runner import Experiment, Results, Settings, describe_model, seeds_of, steps_of, train_run, vit_config

KINDS = ("none", "learned", "2d", "sincos", "relative")
LABELS = {"none": "none", "learned": "1-D (learned)", "2d": "2-D (learned)", "sincos": "sin-cos", "relative": "relative"}


def run(settings: Settings) -> Results:
    steps = steps_of(settings, EXPERIMENT)
    rows, models = [], {}
    for kind in KINDS:
        architecture = vit_config(settings, pos_embed=kind)
        models[LABELS[kind]] = describe_model(architecture)
        for seed in seeds_of(settings, EXPERIMENT):
            result = train_run(settings, f"posemb-{kind}-seed{seed}", seed=seed, steps=steps, architecture=architecture)
            row = {"pos_embed": LABELS[kind], "seed": seed, "val_top1": result.summary["val_top1"]}
            row.update(fewshot(result.model, settings.data))
            rows.append(row)
    shots = tuple(key for key in rows[0] if key.startswith("fewshot_"))
    results = Results(rows, group_by=("pos_embed",), metrics=("val_top1", *shots), models=models)
    results.findings = findings(results.summary())
    return results


def fewshot(model, data: str) -> dict[str, float]:
    """k-shot linear accuracy of the frozen features on the validation split, for every k of
    (1, 5, 10, 25) that each class has enough training images for (3 draws each)."""
    transform = eval_transform(model.config)
    splits = load_datasets(data, transform, transform)
    fewest = int(np.bincount(splits.train.labels).min())
    shots = [k for k in SHOTS if k <= fewest]
    if not shots:
        raise ValueError(f"few-shot evaluation of {data!r}: a class has {fewest} training images, fewer than 1 shot")
    result = evaluate_representation(model, splits.train, splits.val, shots=shots, probe=False,
                                     num_classes=splits.num_classes)
    return {f"fewshot_{k}": score["mean"] for k, score in result["fewshot"]["shots"].items()}


def findings(summary: list[dict[str, Any]]) -> list[str]:
    """Does any position embedding beat none, on both measures, as in Table 8?"""
    lines = []
    metric = "fewshot_5" if "fewshot_5" in summary[0] else next(k for k in summary[0] if k.startswith("fewshot_"))
    for key, name in ((metric, f"{metric.split('_')[1]}-shot linear"), ("val_top1", "trained")):
        scores = {e["pos_embed"]: e[key] for e in summary}
        none = scores.pop("none")
        best = max(scores, key=scores.get)
        spread = max(scores.values()) - min(scores.values())
        verdict = ("every kind beats none, as in Table 8" if min(scores.values()) > none
                   else "not every kind beats none, unlike Table 8")
        lines.append(f"{name}: none {100 * none:.1f}%, best {best} {100 * scores[best]:.1f}%; the four kinds with "
                     f"a position embedding lie within {100 * spread:.1f} points; {verdict}.")
    return lines


def plot(axes: Axes, summary: list[dict[str, Any]]) -> None:
    """Grouped bars per position embedding: each few-shot accuracy and the trained accuracy."""
    metrics = [key for key in summary[0] if key.startswith("fewshot_") and not key.endswith("_std")] + ["val_top1"]
    width = 0.8 / len(metrics)
    positions = np.arange(len(summary))
    for i, key in enumerate(metrics):
        label = "trained" if key == "val_top1" else f"{key.split('_')[1]}-shot linear"
        axes.bar(positions + i * width, [100 * e[key] for e in summary], width,
                 yerr=[100 * e[f"{key}_std"] for e in summary], capsize=2, label=label)
    axes.set_xticks(positions + width * (len(metrics) - 1) / 2, [e["pos_embed"] for e in summary])
    lowest = min(100 * e[key] for e in summary for key in metrics)
    axes.set_ylim(max(0.0, lowest - 10), 100)  # differences of a few points stay visible
    axes.set_ylabel("accuracy (%)")
    axes.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=len(metrics))


EXPERIMENT = Experiment(
    name="posemb",
    reproduces="Table 8 (position embeddings)",
    question="Does a position embedding help, and does its kind matter?",
    steps=300,
    seeds=(0, 1),
    run=run,
    columns=("pos_embed", "fewshot_1", "fewshot_5", "fewshot_10", "fewshot_25", "val_top1"),
    plot=plot,
)
