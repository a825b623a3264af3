"""The benchmark's results as JSON and as Markdown tables, with the targets met or not.

The JSON carries "kind" ("model-only" here), "machine" and "markdown", the keys docs/benchmarks.md is
assembled from (document.py); its sentences about who leads are computed from the rows.
"""

from __future__ import annotations

import json
from pathlib import Path

from .implementations import OPENVINO, OTHER_NUMERICS
from .machine import capability_text, cpu_text, utilisation
from .openvino import emulation_note
from .targets import LATENCY_BATCH, OPENVINO_TARGETS, TARGETS, Target

INT8_POINTS_LOST = 0.5  # the most top-1 points int8 may lose on the digits model
KIND = "model-only"  # the "kind" of a model-only result; other benchmarks write their own kinds


def fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def gflops(flops: float) -> str:
    """913 or 1,234; an emulated dtype's 0.72 rather than 0."""
    return f"{flops / 1e9:,.0f}" if flops >= 1e10 else f"{flops / 1e9:.2g}"


def case_name(case: dict) -> str:
    return f"{case['variant']} @{case['image_size']}"


def machine_line(machine: dict) -> str:
    """Where a run ran: CPU (or GPU), capability, cores, threads, torch, the peers' versions, the load."""
    where = machine.get("gpu") or f"{cpu_text(machine)}, {machine.get('cpu_count', '?')} cores"
    peers = machine.get("peers")
    versions = ", ".join(f"{name} {version or 'not installed'}" for name, version in peers.items()) if peers else ""
    line = (
        f"Machine: {where}, CPU capability {capability_text(machine)}, "
        f"{machine.get('torch_threads', '?')} torch threads, torch {machine.get('torch', 'not recorded')}, "
        f"{versions or 'peer versions not recorded'}; load average at start {machine.get('load_average')}."
    )
    return f"{line} {machine['note']}" if machine.get("note") else line


def leaders(cases: list[dict]) -> str:
    """Whether vitlab leads the best peer in every case that has one, computed from the ratios."""
    behind = [
        f"{case_name(case)} {case['task']} {case['dtype']} ({case['vitlab_over_best_peer']:.2f}x)"
        for case in cases
        if case["vitlab_over_best_peer"] is not None and case["vitlab_over_best_peer"] < 1
    ]
    if not any(case["vitlab_over_best_peer"] is not None for case in cases):
        return "No case has both vitlab and a peer."
    return (
        "vitlab leads the best peer in every case."
        if not behind
        else f"vitlab trails the best peer in: {'; '.join(behind)}."
    )


def targets_table(
    results: dict, table: bool = True, targets: tuple[Target, ...] | None = None, heading: str = ""
) -> list[str]:
    """Each target (of the run's preset unless given): the ratio measured, its lowest and highest within
    one round, and whether it is met (by the measured ratio); the summary line starts with `heading`.
    Without `table`, the sentence naming those missed and those a rerun may miss alone."""
    if targets is None:
        targets = TARGETS.get(results.get("preset") or "", ())
    if not targets:
        return []
    lines = ["| target | measured | within one round, lowest - highest | target met |", "|---|---:|---:|---|"]
    missed, close = [], []
    for target in targets:
        ratio, rounds = target.ratio(results["cases"]), target.round_ratios(results["cases"])
        verdict = "not measured" if ratio is None else "met" if ratio >= target.at_least else "not met"
        if verdict != "met":
            missed.append(f"{target.label} ({fmt(ratio, '.2f', 'x')})")
        elif rounds and min(rounds) < target.at_least:
            close.append(target.label)
        spread = f"{min(rounds):.2f}x - {max(rounds):.2f}x" if rounds else "-"
        lines.append(f"| {target.label} | {fmt(ratio, '.2f', 'x')} | {spread} | {verdict} |")
    summary = f"Every target is met ({len(targets)})." if not missed else f"Misses the target in: {'; '.join(missed)}."
    if close:
        summary += (
            f" Met, but with at least one round below the target, so a rerun may miss: {len(close)} "
            f"({'; '.join(close)})."
        )
    return ["", heading + summary, "", *lines] if table else ["", heading + summary]


def accuracy_lines(result: dict) -> list[str]:
    """The table of int8_accuracy's result, the points each model loses against PyTorch fp32, and
    whether vitlab's int8 (both its own path and its onnxruntime export, the worse of the two) keeps
    within INT8_POINTS_LOST."""
    reference = result["top1"]["pytorch fp32"]
    lost = 100 * (reference - min(result["top1"][name] for name in result["vitlab_int8"]))
    verdict = "met" if lost <= INT8_POINTS_LOST else "not met"
    lines = [
        "",
        f"Target: vitlab's int8 (its own path and its onnxruntime export) loses at most {INT8_POINTS_LOST:g} "
        f"points of top-1: {verdict} ({lost:.2f} points lost at most). "
        f"int8 accuracy on the digits demo model ({result['images']} validation images, `vitlab.bench.int8_accuracy`):",
        "",
        "| model | top-1 | points lost vs PyTorch fp32 | quantization settings |",
        "|---|---:|---:|---|",
    ]
    for name, value in result["top1"].items():
        choice = result["settings"].get(name.removeprefix("int8 "), {}) if name.startswith("int8 ") else {}
        described = ", ".join(f"{key} {value}" for key, value in choice.items()) or "-"
        lines.append(f"| {name} | {100 * value:.2f}% | {100 * (reference - value):.2f} | {described} |")
    return [*lines, ""]


def ran(results: dict, implementation: str) -> bool:
    """Whether `implementation` has a row in any of the run's cases (runs before it was a peer have none)."""
    return any(row["implementation"] == implementation for case in results["cases"] for row in case["rows"])


def latency_lines(cases: list[dict]) -> list[str]:
    """The batch-1 cases' latency rows: each implementation in its best mode, the median and 90th
    percentile of single calls over the interleaved rounds, and vitlab's median over its own."""
    latency_cases = [case for case in cases if case["batch"] == LATENCY_BATCH]
    if not latency_cases:
        return []
    lines = [
        "",
        f"Batch {LATENCY_BATCH} latency (what serving one image costs): each implementation in its best mode, "
        "the median and 90th percentile of single calls over the interleaved rounds.",
        "",
        "| model | dtype | implementation | mode | median ms | p90 ms | its median / vitlab's |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for case in latency_cases:
        rows = {row["implementation"]: row for row in case["rows"]}
        mine = (rows.get("vitlab") or {}).get("latency_ms")
        for row in case["rows"]:
            latency = row.get("latency_ms")
            if latency is None:
                continue
            ratio = latency["median"] / mine["median"] if mine else None
            note = emulation_note(row.get("runtime_config"))
            lines.append(
                f"| {case_name(case)} | {case['dtype']} | {row['implementation']} | {row['mode']}"
                f"{f' ({note})' if note else ''} "
                f"| {latency['median']:.2f} | {latency['p90']:.2f} | {fmt(ratio, '.2f', 'x')} |"
            )
    return lines


def markdown(results: dict, detail: bool = True) -> str:
    """The run's verdicts and its table of vitlab against the best peer; with `detail`, also each
    target's row and every implementation's in every mode (docs/benchmarks.md leaves those to the
    run's JSON)."""
    peak, machine = results["gemm_peak_flops"], results["machine"]
    lines = [
        f"GEMM peak fp32 {gflops(peak['fp32'])} GFLOP/s, bf16 {gflops(peak['bf16'])} GFLOP/s. "
        + leaders(results["cases"]),
        *targets_table(results, table=detail),
        *targets_table(
            results,
            detail,
            OPENVINO_TARGETS.get(results.get("preset") or "", ()) if ran(results, OPENVINO) else (),
            "OpenVINO's own targets, apart from the ones above (vitlab over OpenVINO, each in its best mode): ",
        ),
        *(accuracy_lines(results["int8_accuracy"]) if "int8_accuracy" in results else [""]),
        "| model | task | dtype | batch | vitlab images/s | best peer | peer images/s | vitlab / best peer "
        "| vitlab / timm |",
        "|---|---|---|---:|---:|---|---:|---:|---:|",
    ]
    for case in results["cases"]:
        rows = {row["implementation"]: row for row in case["rows"]}
        mine, peer = rows.get("vitlab"), rows.get(case["best_peer"])
        lines.append(
            f"| {case_name(case)} | {case['task']} | {case['dtype']} | {case['batch']} "
            f"| {fmt(mine and mine['images_per_s'], '.1f')} | {case['best_peer'] or '-'} "
            f"| {fmt(peer and peer['images_per_s'], '.1f')} | {fmt(case['vitlab_over_best_peer'], '.2f', 'x')} "
            f"| {fmt(case['vitlab_over_timm'], '.2f', 'x')} |"
        )
    if not detail:
        return "\n".join([*lines, *latency_lines(results["cases"])]) + "\n"
    lines += [
        "",
        f"CPU capability {capability_text(machine)}. Every implementation in its best mode (fastest median over the interleaved rounds); MFU against the fastest GEMM on "
        "the dtype's numbers (fp32's where bf16 is emulated: bf16 widens to it exactly), none for int8; peak memory is the most tensor memory alive during one step above that alive before it "
        "(not measured for onnxruntime, whose memory is its own). The int8 rows (vitlab-int8, "
        "onnxruntime-int8) are never the best peer: their numbers differ from fp32's; nor is OpenVINO, held "
        "to targets of its own. OpenVINO's settings, as it reports them, are in the JSON's rows (runtime_config).",
        "",
        "| model | task | dtype | implementation | best mode | images/s | MFU | peak memory MiB "
        "| all modes (images/s) |",
        "|---|---|---|---|---|---:|---:|---:|---|",
    ]
    for case in results["cases"]:
        for row in case["rows"]:
            modes = ", ".join(f"{mode} {speed:.1f}" for mode, speed in row["modes"].items())
            # from the measurements, not the stored "mfu": runs recorded before `utilisation` agree
            other = row["implementation"] in OTHER_NUMERICS
            mfu = utilisation(case["flops_per_image"], row["images_per_s"], case["dtype"], peak, other)
            note = emulation_note(row.get("runtime_config"))
            mode = f"{row['mode']} ({note})" if note else row["mode"]
            lines.append(
                f"| {case_name(case)} | {case['task']} | {case['dtype']} | {row['implementation']} | {mode} "
                f"| {row['images_per_s']:.1f} | {fmt(mfu and 100 * mfu, '.0f', '%')} "
                f"| {fmt(row['peak_memory_mib'], '.0f')} | {modes} |"
            )
    lines += latency_lines(results["cases"])
    return "\n".join(lines) + "\n"


def with_document_keys(results: dict, preset: str | None) -> dict:
    """`results` with the keys docs/benchmarks.md is assembled from: kind, preset, markdown (machine is there)."""
    tagged = {"kind": KIND, "preset": preset, **results}
    return {**tagged, "markdown": markdown(tagged)}


def write(results: dict, out_dir: str | Path, name: str = "bench") -> tuple[Path, Path]:
    """NAME.json and NAME.md in out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{name}.json", out / f"{name}.md"
    text = markdown(results)
    json_path.write_text(json.dumps({**results, "markdown": text}, indent=1) + "\n")
    md_path.write_text(machine_line(results["machine"]) + "\n\n" + text)
    return json_path, md_path
