"""`pooling`: class token against global average pooling over a learning-rate sweep (paper
Appendix D.3, Fig. 9).

The paper found that GAP trained with the class token's learning rate does poorly, yet with its own
(lower) learning rate matches the class token: the difference is the learning rate, not the
pooling. Here both ViTs train with each learning rate of the sweep.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from .runner import Experiment, Results, Settings, describe_model, plot_lines, seeds_of, steps_of, train_run, vit_config

LRS = (3e-4, 1e-3, 3e-3, 1e-2)
LABELS = {"token": "class token", "gap": "GAP"}


def run(settings: Settings) -> Results:
    steps = steps_of(settings, EXPERIMENT)
    rows, models = [], {}
    for pool, label in LABELS.items():
        architecture = vit_config(settings, pool=pool)
        models[label] = describe_model(architecture)
        for lr in settings.lrs or LRS:
            for seed in seeds_of(settings, EXPERIMENT):
                result = train_run(
                    settings,
                    f"pool-{pool}-lr{lr:g}-seed{seed}",
                    seed=seed,
                    steps=steps,
                    architecture=architecture,
                    lr=lr,
                )
                rows.append({"pool": label, "lr": lr, "seed": seed, "val_top1": result.summary["val_top1"]})
    results = Results(rows, group_by=("pool", "lr"), metrics=("val_top1",), models=models)
    results.findings = findings(results.summary())
    return results


def findings(summary: list[dict[str, Any]]) -> list[str]:
    """Each pooling's best learning rate and accuracy, and the gap between the two bests."""
    best = {}
    for label in LABELS.values():
        entries = [e for e in summary if e["pool"] == label]
        best[label] = max(entries, key=lambda e: e["val_top1"])
    lines = [f"{label}: best at lr {e['lr']:g} with {100 * e['val_top1']:.1f}%" for label, e in best.items()]
    gap = best["class token"]["val_top1"] - best["GAP"]["val_top1"]
    lines.append(
        f"Each at its own best learning rate, class token minus GAP is {100 * gap:+.1f} points "
        f"(the paper: both work once the learning rate is tuned for each)."
    )
    return lines


EXPERIMENT = Experiment(
    name="pooling",
    reproduces="Fig. 9 (class token vs global average pooling)",
    question="Is GAP as good as the class token once each has its own learning rate?",
    steps=300,
    seeds=(0,),
    run=run,
    columns=("pool", "lr", "val_top1"),
    plot=partial(plot_lines, series="pool", x="lr", xlabel="peak learning rate (AdamW)"),  # Fig. 9: over epochs
    options=("lrs",),
)
