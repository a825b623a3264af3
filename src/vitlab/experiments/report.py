"""An experiment's outputs in DIR: NAME.md (the table, budgets, seeds, command), NAME.json (every
run's numbers and the settings), NAME.png (the plot, drawn like the paper's figure)."""

from __future__ import annotations

import json
import textwrap
from dataclasses import asdict
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from vitlab.bench.machine import cpu_text
from vitlab.figures import save_figure

from .provenance import provenance
from .runner import Experiment, Results, Settings, seeds_of, steps_of

# Column headers of the Markdown table; accuracies are shown in percent with their std over seeds.
HEADERS = {
    "model": "model",
    "fraction": "fraction",
    "train_images": "training images",
    "pos_embed": "position embedding",
    "pool": "pooling",
    "lr": "learning rate",
    "start": "start",
    "val_top1": "val top-1 (%)",
    "added": "E_pos added at",
    "paper_fewshot_5": "Table 8, ImageNet 5-shot (%)",
    "fewshot_1": "1-shot (%)",
    "fewshot_5": "5-shot (%)",
    "fewshot_10": "10-shot (%)",
    "fewshot_25": "25-shot (%)",
    "paper_top1": "paper, ImageNet top-1 (%)",
    "size": "width x depth",
    "mflops": "forward MFLOPs / image",
    "ms_per_image": "inference ms / image",
    "axis": "scaled axis",
    "shape": "depth / width / MLP / patch",
    "image_size": "input size (px)",
    "gflops": "forward GFLOPs / image",
    "images_per_s_per_core": "images/s per core",
    "max_batch": "largest batch in budget",
    "peak_mib_at_max": "its peak memory (MiB)",
    "steps": "steps",
    "train_tflops": "training TFLOPs (forward x 3 x images)",
    "optimiser": "pre-training optimiser",
    "pretrain_top1": "pre-training val top-1 (%)",
    "paper_average": "Table 7, R50x1 average (%)",
}


def _cell(entry: dict[str, Any], key: str) -> str:
    value = entry[key]
    if value is None:
        return "-"
    if key.endswith("_std"):
        return ""
    if f"{key}_std" in entry:
        spread = f" ± {100 * entry[f'{key}_std']:.1f}" if len(entry["seeds"]) > 1 else ""
        return f"{100 * value:.1f}{spread}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def markdown_table(columns: list[str], summary: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(HEADERS.get(c, c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(entry, c) for c in columns) + " |" for entry in summary]
    return "\n".join(lines)


def models_table(models: dict[str, dict[str, Any]]) -> str:
    lines = ["| model | architecture | forward MFLOPs / image | parameters |", "|---|---|---|---|"]
    lines += [
        f"| {label} | {m['architecture']} | {m['mflops']:.1f} | {m['params'] / 1e3:.0f}k |"
        for label, m in models.items()
    ]
    return "\n".join(lines)


def write_report(
    experiment: Experiment,
    settings: Settings,
    results: Results,
    wall_time_s: float,
    training_s: float | None = None,
) -> dict[str, Path]:
    """Write DIR/NAME.md, .json and .png; returns their paths."""
    out = settings.out
    out.mkdir(parents=True, exist_ok=True)
    summary = results.summary()
    command = settings.command(experiment)
    machine = provenance(settings.threads)
    seed_list = list(seeds_of(settings, experiment))
    steps = steps_of(settings, experiment)
    budget = {"steps_per_run": steps, "seeds": seed_list}
    document = {
        "experiment": experiment.name,
        "reproduces": experiment.reproduces,
        "command": command,
        "data": settings.data,
        "budget": budget,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(settings).items()},
        "models": results.models,
        **results.extra,
        "summary": summary,
        "runs": results.rows,
        "findings": results.findings,
        "wall_time_s": round(wall_time_s, 1),
        "training_s": round(training_s, 1) if training_s is not None else None,
        "machine": machine,
    }
    paths = {kind: out / f"{experiment.name}.{kind}" for kind in ("md", "json", "png")}
    paths["json"].write_text(json.dumps(document, indent=1) + "\n")

    budget_line = budget_text(settings, steps, seed_list, wall_time_s, training_s)
    parts = [
        f"# {experiment.name}: {experiment.reproduces}",
        experiment.question,
        budget_line,
        f"Commit `{machine['commit']}`, torch {machine['torch']}, {cpu_text(machine)}, "
        f"CPU capability {machine['cpu_capability']}, "
        f"{machine['threads']} thread(s) per run.",
        f"```\n{command}\n```",
    ]
    if results.models:
        parts.append(models_table(results.models))
    parts.append(markdown_table([c for c in experiment.columns if c in summary[0]], summary))
    if results.findings:
        parts.append("\n".join(f"- {finding}" for finding in results.findings))
    parts.append(f"Plot: `{paths['png'].name}`; every run's numbers: `{paths['json'].name}`.")
    paths["md"].write_text("\n\n".join(parts) + "\n")

    write_plot(experiment, settings.data, summary, paths["png"])
    return paths


def budget_text(
    settings: Settings, steps: int | None, seed_list: list[int], wall_time_s: float, training_s: float | None
) -> str:
    """The report's line on the data, the budget, the seeds and the time it took."""
    if not steps:  # measured, not trained
        return f"No training; this report's invocation {wall_time_s / 60:.1f} min."
    seeds = ", ".join(map(str, seed_list))
    return (
        f"Data `{settings.data}` at {settings.image_size} px; {steps} optimiser steps per run; "
        f"seeds {seeds} (mean ± std over seeds where more than one); "
        + (f"training {training_s / 60:.1f} min summed over the runs as each ran, " if training_s is not None else "")
        + f"this report's invocation {wall_time_s / 60:.1f} min (run folders found finished are not retrained)."
    )


def write_plot(experiment: Experiment, data: str | None, summary: list[dict], path: Path) -> None:
    """The experiment's plot and panels of its summary, side by side, as one PNG."""
    plots = (experiment.plot, *experiment.panels)  # one panel each, side by side
    figure = Figure(figsize=(6.4 * len(plots), 4.4), layout="constrained")
    FigureCanvasAgg(figure)
    for axes, plot in zip(figure.subplots(1, len(plots), squeeze=False)[0], plots):
        plot(axes, summary)
        axes.grid(alpha=0.3)
    title = textwrap.fill(f"{experiment.name} on {data}: {experiment.reproduces}", 80 * len(plots))
    if len(plots) == 1:  # a long title wraps instead of running off the figure
        axes.set_title(title, fontsize=9)
    else:
        figure.suptitle(title, fontsize=9)
    save_figure(figure, path, dpi=120)
