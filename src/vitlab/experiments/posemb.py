"""`posemb`: the position-embedding ablation of the paper's Table 8 (Appendix D.4), every row and column.

ViTs that differ only in position information: Table 8's rows (no E_pos, learned 1-D, learned 2-D
with X and Y embeddings of D/2 each, and 1-D relative attention) and its columns (E_pos added to
the input, one E_pos per layer added before it, one shared E_pos added before every layer; the
paper has the last two for 1-D and 2-D only), plus two kinds outside Table 8: fixed sine-cosine,
and a per-head 2-D relative logit bias (as BEiT). Each is trained on the data, then measured twice:
few-shot linear accuracy of its frozen pre-logits features (the paper's Table 8 metric, 5-shot on
ImageNet there) and the trained classifier's accuracy.
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
from .wording import compare

# (pos_embed, pos_embed_at) in Table 8's order, then the two kinds the table does not have.
CONFIGS = (
    ("none", "input"),
    ("learned", "input"),
    ("learned", "every_layer"),
    ("learned", "every_layer_shared"),
    ("2d", "input"),
    ("2d", "every_layer"),
    ("2d", "every_layer_shared"),
    ("relative", "input"),
    ("sincos", "input"),
    ("relative_bias", "input"),
)
LABELS = {
    "none": "none",
    "learned": "1-D (learned)",
    "2d": "2-D (learned)",
    "relative": "relative (1-D attention)",
    "sincos": "sin-cos (not in Table 8)",
    "relative_bias": "2-D relative bias (not in Table 8)",
}
WHERE = {"input": "input", "every_layer": "every layer", "every_layer_shared": "every layer, shared"}
PER_LAYER = (WHERE["every_layer"], WHERE["every_layer_shared"])


def where_label(kind: str, where: str) -> str:
    """Where the position information enters; the relative kinds act on every layer's attention logits."""
    if kind == "none":
        return "n/a"
    return "attention logits, every layer" if kind.startswith("relative") else WHERE[where]


# Table 8 (ViT-B/16, ImageNet 5-shot linear accuracy), in percent; "" where the table has no entry.
PAPER = {
    ("none", "input"): 61.382,
    ("learned", "input"): 64.206,
    ("learned", "every_layer"): 63.964,
    ("learned", "every_layer_shared"): 64.292,
    ("2d", "input"): 64.001,
    ("2d", "every_layer"): 64.046,
    ("2d", "every_layer_shared"): 64.022,
    ("relative", "input"): 64.032,
}


def run(settings: Settings) -> Results:
    steps = steps_of(settings, EXPERIMENT)
    rows, models = [], {}
    for kind, where in CONFIGS:
        architecture = vit_config(settings, pos_embed=kind, pos_embed_at=where)
        models[f"{LABELS[kind]}, {WHERE[where]}"] = describe_model(architecture)
        tag = f"posemb-{kind}" + ("" if where == "input" else f"-{where}")
        paper = f"{PAPER[kind, where]:.1f}" if (kind, where) in PAPER else ""
        for seed in seeds_of(settings, EXPERIMENT):
            result = train_run(settings, f"{tag}-seed{seed}", seed=seed, steps=steps, architecture=architecture)
            row = {
                "pos_embed": LABELS[kind],
                "added": where_label(kind, where),
                "paper_fewshot_5": paper,
                "seed": seed,
                "val_top1": result.summary["val_top1"],
            }
            row.update(fewshot(result.model, settings.data))
            rows.append(row)
    shots = tuple(key for key in rows[0] if key.startswith("fewshot_"))
    results = Results(
        rows, group_by=("pos_embed", "added", "paper_fewshot_5"), metrics=("val_top1", *shots), models=models
    )
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
    result = evaluate_representation(
        model, splits.train, splits.val, shots=shots, probe=False, num_classes=splits.num_classes
    )
    return {f"fewshot_{k}": score["mean"] for k, score in result["fewshot"]["shots"].items()}


def findings(summary: list[dict[str, Any]]) -> list[str]:
    """Table 8's two readings, from the numbers: does every E_pos beat none, and does adding it at
    every layer (own or shared) move 1-D and 2-D against adding it to the input?"""
    lines = []
    metric = "fewshot_5" if "fewshot_5" in summary[0] else next(k for k in summary[0] if k.startswith("fewshot_"))
    score = {(e["pos_embed"], e["added"]): e for e in summary}
    for key, name in ((metric, f"{metric.split('_')[1]}-shot linear"), ("val_top1", "trained")):
        at_input = {kind: e[key] for (kind, added), e in score.items() if added not in PER_LAYER}  # Table 8's default
        none = at_input.pop(LABELS["none"])
        table_8 = {kind: value for kind, value in at_input.items() if "not in Table 8" not in kind}
        best = max(table_8, key=lambda kind: table_8[kind])
        spread = max(table_8.values()) - min(table_8.values())
        beaten = [kind for kind, value in table_8.items() if compare(value, none) != "above"]
        verdict = (
            "every Table 8 kind beats none, as in Table 8"
            if not beaten
            else f"{' and '.join(beaten)} {'does' if len(beaten) == 1 else 'do'} not beat none, unlike Table 8"
        )
        lines.append(
            f"{name}, Table 8's default column: none {100 * none:.1f}%, best {best} {100 * table_8[best]:.1f}%; "
            f"the {len(table_8)} Table 8 kinds with position information lie within {100 * spread:.1f} "
            f"points; {verdict}."
        )
        for kind in (LABELS["learned"], LABELS["2d"]):
            if (kind, WHERE["input"]) not in score:
                continue
            base = score[kind, WHERE["input"]][key]
            moves = [
                versus(score[kind, WHERE[where]], score[kind, WHERE["input"]], key, WHERE[where])
                for where in ("every_layer", "every_layer_shared")
                if (kind, WHERE[where]) in score
            ]
            lines.append(f"{name}, {kind}: input {100 * base:.1f}%, " + ", ".join(moves) + ".")
    return lines


def versus(entry: dict[str, Any], base: dict[str, Any], key: str, name: str) -> str:
    """ "every layer 96.0% (below input, within the seeds' spread)": the word and the noise from the numbers."""
    noise = max(entry[f"{key}_std"], base[f"{key}_std"])
    within = ", within the seeds' spread" if abs(entry[key] - base[key]) <= noise and len(entry["seeds"]) > 1 else ""
    return f"{name} {100 * entry[key]:.1f}% ({compare(entry[key], base[key])} input{within})"


def plot(axes: Axes, summary: list[dict[str, Any]]) -> None:
    """Grouped bars per configuration, from zero: the 5-shot linear and the trained accuracy."""
    shot = (
        "fewshot_5"
        if "fewshot_5" in summary[0]
        else next(k for k in summary[0] if k.startswith("fewshot_") and not k.endswith("_std"))
    )
    metrics = [shot, "val_top1"]
    width = 0.8 / len(metrics)
    positions = np.arange(len(summary))
    for i, key in enumerate(metrics):
        label = "trained" if key == "val_top1" else f"{key.split('_')[1]}-shot linear"
        axes.bar(
            positions + i * width,
            [100 * e[key] for e in summary],
            width,
            yerr=[100 * e[f"{key}_std"] for e in summary],
            capsize=2,
            label=label,
        )
    names = [f"{e['pos_embed'].replace(' (not in Table 8)', '*')}\n{e['added']}" for e in summary]
    axes.set_xticks(positions + width * (len(metrics) - 1) / 2, names, rotation=60, ha="right", fontsize=6)
    axes.set_ylim(0, 100)  # bars start at zero
    axes.set_ylabel("accuracy (%)  (* not in Table 8)")
    axes.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))


EXPERIMENT = Experiment(
    name="posemb",
    reproduces="Table 8 (position embeddings: kinds, and where E_pos is added)",
    question="Does a position embedding help, and does its kind matter?",
    steps=300,
    seeds=(0, 1),
    run=run,
    columns=("pos_embed", "added", "fewshot_1", "fewshot_5", "fewshot_10", "fewshot_25", "val_top1", "paper_fewshot_5"),
    plot=plot,
)
