"""docs/experiments.md, assembled from the experiments' own outputs (never typed by hand).

    vitlab experiment report --runs DIR --out docs/experiments.md

copies each registered experiment's DIR/NAME.md, .json and .png next to the document (into
docs/experiments/) and joins the sections under a fixed preamble that holds no measured number.
An experiment registered but not found in DIR gets a section saying so and the command that
makes it, so a document never looks complete when it is not.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from .runner import Experiment

log = logging.getLogger("vitlab")

KINDS = ("md", "json", "png")

PREAMBLE = """\
# The paper's comparisons in miniature

The paper's claims are comparisons: ViT against a BiT ResNet and a ResNet+ViT hybrid as the
training set grows (Figs. 3-4), the position-embedding ablation (Table 8), class token against
global average pooling (Fig. 9), "pre-train large, then transfer", the fine-tuning learning
rate picked on a dev split (Appendix B.1.1, Table 4), self-supervised masked patch prediction
(Sec. 4.6), Axial-ViT (Appendix D.6, Fig. 13), the transformer's shape (Appendix D.2, Fig. 8),
inference cost across input sizes (Appendix D.5, Fig. 12), accuracy against training compute
(Fig. 5) and SGD against Adam for ResNets (Appendix D.1, Table 7). `vitlab experiment NAME`
reruns each on your data and budget with one command:

```bash
{commands}
# options: --budget-steps N --seeds 0 1 2 --image-size 32 --threads 1
#          --fractions 0.1 0.25 0.5 1 (data-scaling)   --lrs 3e-4 1e-3 3e-3 1e-2 (pooling)
#          --pretrain-data SRC --pretrain-steps N --fractal-classes C --fractal-per-class N --fractal-size S
#          --row pets --ckpt CKPT (lr-sweep)   --label-fraction 0.05 (self-supervision)   --sizes 64x4 (axial)
#          --models Ti/16 BiT-R50x1 --input-sizes 224 384 --memory-budget-mib 128 --rounds 3 (compute-cost)
```

```python
from vitlab.experiments import Settings, run_experiment

results, paths = run_experiment("pooling", Settings(data="digits", out="runs/exp", seeds=(0, 1)))
```

`--data` takes any vitlab source (`digits`, an ImageFolder, CIFAR, WebDataset shards).

**Budgets are optimiser steps** (`--budget-steps`, per training run on the data), so a result
does not depend on the machine; pre-training is budgeted and reported separately
(`--pretrain-steps`). Each experiment writes `DIR/NAME.md` (the table, budgets, seeds, the commit,
torch version and CPU capability, and the command that repeats it), `DIR/NAME.json` (every run's
numbers, the settings, the models with their FLOPs) and `DIR/NAME.png` (the plot), and keeps every
run as an ordinary trainer run folder in `DIR/runs/TAG` (loadable model, metrics, `run.yaml`).
Running the same command again resumes the run folders, so an interrupted experiment continues and
a finished one is re-reported without retraining.

**One recipe for every run**: the `demo` recipe (`vitlab.training.recipes`: AdamW, warm-up then cosine
decay, label smoothing, mild crops, no flip, fp32, one thread), with the experiment's step budget.
Nothing is tuned per model except where the experiment is the tuning (pooling's learning-rate
sweep) or the recipe is what it compares (sgd-adam's two pre-training optimisers and the paper's
fine-tuning recipe; self-supervision's masked patch objective); compute-cost trains nothing. The compared models are listed in each section with their forward FLOPs per image
(`torch.utils.flop_counter`) and parameter counts.

**This document is generated.** Everything below the line is the experiments' own reports, joined by

```bash
{report}
```

(`make experiments-doc` runs every experiment with its default budget, then that command). The
sentences under each table are computed from its numbers. Each section names the machine it ran on.
On CPU, the same commit, torch version, CPU (vendor, family and model) and CPU capability reproduce
each number exactly. Another CPU, even one of the same capability, rounds its GEMMs differently, and
a few hundred steps carry that on: its numbers differ from these by about as much as another seed's
would, so compare them with the seeds' spread, not digit for digit
(`tests/experiments/test_document.py` retrains the smallest configuration and compares it with its
recorded JSON, exactly on the machine it was recorded on and within three standard deviations of
its seed spread elsewhere). A section whose machine line names no CPU was recorded before the
CPU's identity was.

---
"""


def section(name: str, text: str, assets: str) -> str:
    """One experiment's report as a section: headings one level down, its plot shown inline."""
    text = re.sub(r"^(#+) ", r"#\1 ", text.strip(), flags=re.MULTILINE)
    plot_line = f"Plot: `{name}.png`; every run's numbers: `{name}.json`."
    if plot_line not in text:
        raise ValueError(f"{name}.md: its last line is not {plot_line!r}; was it written by `vitlab experiment`?")
    return text.replace(
        plot_line,
        f"![{name}]({assets}/{name}.png)\n\nEvery run's numbers: [`{assets}/{name}.json`]({assets}/{name}.json).",
    )


def missing(experiment: Experiment, report: str) -> str:
    return (
        f"## {experiment.name}: {experiment.reproduces}\n\n**Not regenerated**: no `{experiment.name}.md` was "
        f"found when this document was assembled (`{report}`). Make it with "
        f"`vitlab experiment {experiment.name} --data digits --out DIR`, then assemble again."
    )


def assemble(assets: Path, experiments: dict[str, Experiment], report: str) -> str:
    """The document's text from the section files in `assets` (docs/experiments/), in registry order."""
    link = assets.name
    commands = "\n".join(
        f"vitlab experiment {name:<{max(map(len, experiments))}} --data digits --out runs/exp" for name in experiments
    )
    parts = [PREAMBLE.format(commands=commands, report=report)]
    for name, experiment in experiments.items():
        path = assets / f"{name}.md"
        parts.append(section(name, path.read_text(), link) if path.is_file() else missing(experiment, report))
    return "\n\n".join(parts) + "\n"


def write_document(runs: Path, out: Path, experiments: dict[str, Experiment]) -> tuple[Path, list[str]]:
    """Copy each experiment's outputs from `runs` beside `out` and write `out`; returns it and the
    names of registered experiments that `runs` did not hold (each also logged)."""
    runs, out = Path(runs), Path(out)
    if not runs.is_dir():
        raise ValueError(f"--runs {runs}: not a folder of experiment outputs")
    assets = out.parent / out.stem  # docs/experiments.md -> docs/experiments/
    assets.mkdir(parents=True, exist_ok=True)
    absent = []
    for name in experiments:
        sources = [runs / f"{name}.{kind}" for kind in KINDS]
        if not all(source.is_file() for source in sources):
            absent.append(name)
            log.warning(
                "experiment report: %s has no complete %s.{md,json,png} in %s; its section says so", name, name, runs
            )
            for kind in KINDS:  # an earlier copy would pass for this run's
                (assets / f"{name}.{kind}").unlink(missing_ok=True)
            continue
        for source in sources:
            shutil.copyfile(source, assets / source.name)
    report = f"vitlab experiment report --runs {runs.as_posix()} --out {out.as_posix()}"
    out.write_text(assemble(assets, experiments, report))
    return out, absent
