"""docs/experiments.md is the experiments' own outputs joined by one command, its sentences about
direction follow from its numbers, its bars start at zero, and its smallest run reproduces."""

from __future__ import annotations

import json
import re

import pytest
import torch
from matplotlib.figure import Figure

from helpers import REPO_ROOT
from vitlab.cli import main
from vitlab.experiments import EXPERIMENTS, Settings, data_scaling, posemb, pretrain_transfer
from vitlab.experiments import provenance as provenance_module
from vitlab.experiments.document import assemble, write_document
from vitlab.experiments.provenance import git_commit, provenance, reproduces_bitwise
from vitlab.experiments.runner import train_run, vit_config
from vitlab.experiments.wording import trend

DOCS = REPO_ROOT / "docs"
ASSETS = DOCS / "experiments"
# On another machine (torch release, CPU vendor/family/model, capability) GEMMs round differently and
# 300 steps carry that on: the run is then one more draw of the same training, as another seed is.
# The smallest configuration (ViT on 10% of digits, 300 steps) over seeds 0-9 on an AMD EPYC of family
# 25 model 1 (AVX2) gave val top-1 0.842-0.897, mean 0.878, standard deviation 0.0172; the tolerance is
# three standard deviations of that spread (18 of digits' 360 validation images). An Intel Xeon
# (family 6 model 167, AVX512) gave 0.8806 and that AMD EPYC 0.8861 against the recorded 0.8889.
TOLERANCE = 0.05


@pytest.mark.unit
def test_document_is_the_experiment_outputs_joined():
    text = (DOCS / "experiments.md").read_text()
    found = re.search(r"vitlab experiment report --runs \S+ --out \S+", text)
    assert found, "docs/experiments.md was not assembled by `vitlab experiment report`"
    command = found.group(0)
    assert text == assemble(ASSETS, EXPERIMENTS, command), "docs/experiments.md is stale: rerun " + command
    assert text.count("**Not regenerated**") < len(EXPERIMENTS) / 2, "most experiments have no outputs in docs/"
    for name in EXPERIMENTS:
        if not (ASSETS / f"{name}.json").is_file():  # registered, not run: the document must say so
            assert f"## {name}: {EXPERIMENTS[name].reproduces}\n\n**Not regenerated**" in text
            continue
        document = json.loads((ASSETS / f"{name}.json").read_text())
        section = (ASSETS / f"{name}.md").read_text()
        assert document["experiment"] == name and f"![{name}](experiments/{name}.png)" in text
        for entry in document["summary"]:
            if "val_top1" in entry:  # accuracies in percent; compute-cost trains nothing and measures speed
                assert f"| {100 * entry['val_top1']:.1f}" in section, (name, entry)
            else:
                assert f"| {entry['images_per_s_per_core']:g} | {entry['max_batch']} |" in section, (name, entry)
        for finding in document["findings"]:
            assert f"- {finding}" in section
        assert {"commit", "torch", "cpu_capability"} <= set(document["machine"])


@pytest.mark.unit
def test_report_joins_every_registered_experiment_and_says_which_are_missing(tmp_path, caplog):
    runs, out = tmp_path / "runs", tmp_path / "docs" / "experiments.md"
    runs.mkdir()
    name = "pooling"
    (runs / f"{name}.md").write_text(
        f"# {name}: Fig. 9\n\nA table.\n\nPlot: `{name}.png`; every run's numbers: `{name}.json`.\n"
    )
    (runs / f"{name}.json").write_text("{}")
    (runs / f"{name}.png").write_bytes(b"png")
    (out.parent / "experiments").mkdir(parents=True)
    (out.parent / "experiments" / "posemb.md").write_text("an earlier run's section")
    registered = {
        **EXPERIMENTS,
        "lr-sweep": EXPERIMENTS["pooling"].__class__(
            **{**EXPERIMENTS["pooling"].__dict__, "name": "lr-sweep", "reproduces": "a sweep"}
        ),
    }
    path, absent = write_document(runs, out, registered)
    text = path.read_text()
    assert absent == [n for n in registered if n != name]
    assert f"## {name}: Fig. 9" in text and f"![{name}](experiments/{name}.png)" in text
    assert "## lr-sweep: a sweep\n\n**Not regenerated**" in text
    assert "an earlier run's section" not in text and not (out.parent / "experiments" / "posemb.md").exists()
    assert (out.parent / "experiments" / f"{name}.png").read_bytes() == b"png"
    assert text.index("## data-scaling") < text.index("## pooling") < text.index("## lr-sweep")


@pytest.mark.unit
@pytest.mark.fault("bad-input", kinds=3)
def test_report_command_refuses_what_it_cannot_join(tmp_path, capsys):
    assert main(["experiment", "report", "--out", str(tmp_path / "x.md")]) != 0
    assert "needs --runs" in capsys.readouterr().err
    assert main(["experiment", "report", "--runs", str(tmp_path / "absent"), "--out", str(tmp_path / "x.md")]) != 0
    assert "not a folder" in capsys.readouterr().err
    assert main(["experiment", "pooling", "--out", str(tmp_path)]) != 0
    assert "needs --data" in capsys.readouterr().err


@pytest.mark.integration
def test_git_commit_is_unknown_outside_git(tmp_path):
    assert git_commit(tmp_path) == "unknown"
    assert re.fullmatch(r"[0-9a-f]{7,}(-dirty)?|unknown", git_commit())


@pytest.mark.unit
def test_direction_words_follow_the_numbers():
    assert trend([-5.8, -5.0, -2.7, -3.6]) == "moves both ways"
    assert trend([-5.8, -5.0, -2.7]) == "grows" and trend([3, 2, 2]) == "shrinks" and trend([1, 1]) == "ties"
    # data-scaling's rows as docs/experiments.md once had them, where the text said the deficit shrinks
    rows = []
    for fraction, images, scores in (
        (0.1, 142, (0.889, 0.947, 0.844)),
        (0.25, 359, (0.922, 0.972, 0.9)),
        (0.5, 718, (0.956, 0.983, 0.939)),
        (1.0, 1437, (0.958, 0.994, 0.944)),
    ):
        rows += [
            {"model": m, "fraction": fraction, "train_images": images, "val_top1": s}
            for m, s in zip(("ViT", "BiT", "hybrid"), scores)
        ]
    gap_line = data_scaling.findings(rows)[-1]
    assert "-5.8 at 142, -5.0 at 359, -2.7 at 718, -3.6 at 1437" in gap_line
    assert "moves both ways" in gap_line and "narrows" not in gap_line


@pytest.mark.unit
@pytest.mark.parametrize(
    "module,summary",
    [
        (
            posemb,
            [
                {
                    "pos_embed": "none",
                    "added": "n/a",
                    "fewshot_5": 0.95,
                    "fewshot_5_std": 0.0,
                    "val_top1": 0.97,
                    "val_top1_std": 0.0,
                }
            ],
        ),
        (pretrain_transfer, [{"start": "from scratch", "val_top1": 0.96, "val_top1_std": 0.01}]),
    ],
)
def test_bar_charts_start_at_zero(module, summary):
    axes = Figure().subplots()
    module.EXPERIMENT.plot(axes, summary)
    assert axes.get_ylim()[0] == 0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_smallest_configuration_reproduces_its_recorded_numbers(tmp_path):
    """data-scaling's ViT on 10% of digits, retrained as the experiment trains it: the same val top-1
    as docs/experiments/data-scaling.json: exactly on the machine it was recorded on, else within the
    seeds' spread."""
    document = json.loads((ASSETS / "data-scaling.json").read_text())
    recorded = next(r for r in document["runs"] if (r["model"], r["fraction"], r["seed"]) == ("ViT", 0.1, 0))
    settings = Settings(out=tmp_path, seeds=(0,))
    result = train_run(
        settings,
        "ViT-0.1-seed0",
        seed=0,
        steps=document["budget"]["steps_per_run"],
        architecture=vit_config(settings),
        train_fraction=0.1,
    )
    assert result.summary["train_images"] == recorded["train_images"]
    assert_reproduces(result.summary["val_top1"], recorded["val_top1"], document["machine"], provenance(threads=1))


def assert_reproduces(value: float, recorded: float, recorded_on: dict, here: dict) -> None:
    """Bitwise where the machine is the one the number was recorded on, else within TOLERANCE."""
    if reproduces_bitwise(recorded_on, here):
        assert value == recorded, f"{value} != {recorded}, recorded on this machine ({here['cpu_model']})"
    else:
        assert abs(value - recorded) <= TOLERANCE, f"{value} vs {recorded} recorded on another machine"


@pytest.mark.integration
@pytest.mark.parametrize(
    "cpu_model,capability,bitwise",
    [
        ("AuthenticAMD family 26 model 2", "AVX512", True),
        ("GenuineIntel family 6 model 167", "AVX512", False),  # same capability, another vendor
        ("AuthenticAMD family 25 model 17", "AVX512", False),  # same vendor, another family/model
        ("AuthenticAMD family 26 model 2", "AVX2", False),  # same CPU, kernels lowered
    ],
)
def test_recorded_numbers_are_compared_bitwise_only_on_the_machine_they_came_from(
    monkeypatch, cpu_model, capability, bitwise
):
    monkeypatch.setattr(provenance_module, "cpu_model", lambda: cpu_model)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    recorded_on = {**provenance(threads=1), "cpu_model": "AuthenticAMD family 26 model 2", "cpu_capability": "AVX512"}
    here = provenance(threads=1)
    assert here["cpu_model"] == cpu_model
    assert reproduces_bitwise(recorded_on, here) is bitwise
    off_by_one_image = 0.8889 - 1 / 360
    if bitwise:
        with pytest.raises(AssertionError, match="recorded on this machine"):
            assert_reproduces(off_by_one_image, 0.8889, recorded_on, here)
    else:
        assert_reproduces(off_by_one_image, 0.8889, recorded_on, here)
        with pytest.raises(AssertionError, match="another machine"):
            assert_reproduces(0.8889 - 2 * TOLERANCE, 0.8889, recorded_on, here)


@pytest.mark.integration
def test_a_record_that_names_no_cpu_is_never_compared_bitwise():
    here = provenance(threads=1)
    written_before = {key: value for key, value in here.items() if key not in ("cpu", "cpu_model")}
    assert not reproduces_bitwise(written_before, here) and reproduces_bitwise(dict(here), here)


@pytest.mark.unit
def test_posemb_findings_compare_each_column_with_the_numbers():
    def entry(kind, added, score, std=0.001):
        return {
            "pos_embed": posemb.LABELS[kind],
            "added": added,
            "seeds": [0, 1],
            "fewshot_5": score,
            "fewshot_5_std": std,
            "val_top1": score,
            "val_top1_std": std,
        }

    summary = [
        entry("none", "n/a", 0.90),
        entry("learned", "input", 0.95),
        entry("learned", "every layer", 0.96),
        entry("learned", "every layer, shared", 0.95),
        entry("2d", "input", 0.93),
        entry("2d", "every layer", 0.92, std=0.02),
        entry("2d", "every layer, shared", 0.94),
        entry("relative", "attention logits, every layer", 0.89),
    ]
    lines = posemb.findings(summary)
    assert "relative (1-D attention) does not beat none, unlike Table 8" in lines[0]
    assert lines[1] == (
        "5-shot linear, 1-D (learned): input 95.0%, every layer 96.0% (above input), "
        "every layer, shared 95.0% (tied with input, within the seeds' spread)."
    )
    assert (
        "every layer 92.0% (below input, within the seeds' spread), every layer, shared 94.0% (above input)" in lines[2]
    )
