"""`pretrain-transfer`: pre-train, then fine-tune, against training from scratch with the same
budget on the target data (the paper's thesis, Sec. 3.2 and 4; pre-training without natural images
as in Nakashima et al., AAAI 2022, "Can Vision Transformers Learn without Natural Images?").

Pre-training data: FractalDB (formula-drawn, no download), generated into DIR/fractaldb unless
--pretrain-data names a source. One ViT is pre-trained (its steps reported separately); then for
each seed it is fine-tuned on the data with a fresh zero-initialised head, and the same ViT is
trained from scratch on the data with the same recipe and the same number of steps.
"""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Any

from vitlab.data.fractaldb import FractalDBSpec, generate_fractaldb

from .runner import Experiment, Results, Settings, describe_model, plot_bars, seeds_of, steps_of, train_run, vit_config

PRETRAIN_STEPS = 1000
PRETRAINED, SCRATCH = "FractalDB pre-trained", "from scratch"


def fractaldb(settings: Settings) -> tuple[str, dict[str, Any]]:
    """The pre-training source: --pretrain-data, or DIR/fractaldb (made once, reused when it matches)."""
    if settings.pretrain_data:
        return settings.pretrain_data, {"source": settings.pretrain_data}
    spec = FractalDBSpec(
        classes=settings.fractal_classes, per_class=settings.fractal_per_class, size=settings.fractal_size
    )
    folder = Path(settings.out) / "fractaldb"
    description: dict[str, float] = {
        "classes": spec.classes,
        "per_class": spec.per_class,
        "size": spec.size,
        "seed": spec.seed,
    }
    index = folder / "fractaldb.json"
    made = json.loads(index.read_text()) if index.is_file() else None
    if made is not None and any(made.get(key) != value for key, value in description.items()):
        raise ValueError(
            f"{folder} holds a FractalDB of {made.get('classes')} classes x {made.get('per_class')} "
            f"images of {made.get('size')} px; choose another --out or pass --pretrain-data {folder}"
        )
    if made is None:
        started = time.perf_counter()
        generate_fractaldb(spec, folder, workers=settings.threads)
        description["generation_s"] = round(time.perf_counter() - started, 1)
    return f"imagefolder:{folder}", {"source": f"FractalDB generated in {folder}", **description}


def run(settings: Settings) -> Results:
    steps = steps_of(settings, EXPERIMENT)
    seeds = seeds_of(settings, EXPERIMENT)
    architecture = vit_config(settings)
    source, pretraining = fractaldb(settings)
    pretrain_steps = settings.pretrain_steps or PRETRAIN_STEPS
    pretrained = train_run(
        settings, "pretrain", seed=seeds[0], steps=pretrain_steps, architecture=architecture, data=source
    )
    pretraining.update(
        steps=pretrain_steps,
        train_images=pretrained.summary["train_images"],
        val_top1=pretrained.summary["val_top1"],
        classes=pretrained.model.config.num_classes,
    )
    rows = []
    for seed in seeds:
        finetuned = train_run(settings, f"finetune-seed{seed}", seed=seed, steps=steps, init=pretrained.out)
        scratch = train_run(settings, f"scratch-seed{seed}", seed=seed, steps=steps, architecture=architecture)
        rows += [
            {"start": PRETRAINED, "seed": seed, "val_top1": finetuned.summary["val_top1"]},
            {"start": SCRATCH, "seed": seed, "val_top1": scratch.summary["val_top1"]},
        ]
    results = Results(
        rows,
        group_by=("start",),
        metrics=("val_top1",),
        models={"ViT": describe_model(architecture)},
        extra={"pretraining": pretraining},
    )
    results.findings = findings(results.summary(), pretraining, steps)
    return results


def findings(summary: list[dict[str, Any]], pretraining: dict[str, Any], steps: int) -> list[str]:
    score = {e["start"]: e for e in summary}
    gap = score[PRETRAINED]["val_top1"] - score[SCRATCH]["val_top1"]
    winner = PRETRAINED if gap > 0 else SCRATCH
    return [
        f"Pre-training: {pretraining['steps']} steps on {pretraining['train_images']} images of "
        f"{pretraining['classes']} classes, {100 * pretraining['val_top1']:.1f}% on its held-out split.",
        f"With the same {steps} steps on the data, {winner} wins by {100 * abs(gap):.1f} points "
        f"({100 * score[PRETRAINED]['val_top1']:.1f}% vs {100 * score[SCRATCH]['val_top1']:.1f}% from scratch)"
        + (", less than the spread over seeds." if abs(gap) < max(e["val_top1_std"] for e in summary) else "."),
    ]


EXPERIMENT = Experiment(
    name="pretrain-transfer",
    reproduces="Sec. 4 (pre-train, then transfer), pre-training on FractalDB",
    question="Does pre-training on formula-drawn fractals help a ViT on the data, at the same fine-tuning budget?",
    steps=300,
    seeds=(0, 1, 2),
    run=run,
    columns=("start", "val_top1"),
    plot=partial(plot_bars, bars="start", xlabel="", ylabel="val top-1 after fine-tuning budget (%)"),
    options=("pretrain_data", "pretrain_steps", "fractal_classes", "fractal_per_class", "fractal_size"),
)
