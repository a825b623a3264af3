"""The benchmark's results as JSON and as Markdown tables."""

from __future__ import annotations

import json
from pathlib import Path

from .machine import capability_text


def fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def gflops(flops: float) -> str:
    """913 or 1,234; an emulated dtype's 0.72 rather than 0."""
    return f"{flops / 1e9:,.0f}" if flops >= 1e10 else f"{flops / 1e9:.2g}"


def case_name(case: dict) -> str:
    return f"{case['variant']} @{case['image_size']}"


def markdown(results: dict) -> str:
    peak = results["gemm_peak_flops"]
    machine = results["machine"]
    where = machine.get("gpu") or f"{machine['cpu']}, {machine['cpu_count']} cores"
    lines = [
        f"Machine: {where}, CPU capability {capability_text(machine)}, torch {machine['torch']}, "
        f"{machine['torch_threads']} threads; "
        f"GEMM peak fp32 {gflops(peak['fp32'])} GFLOP/s, bf16 {gflops(peak['bf16'])} GFLOP/s; "
        f"load average at start {machine['load_average']}.",
        "",
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
    lines += [
        "",
        f"CPU capability {capability_text(machine)}. Every implementation in its best mode (fastest median over the interleaved rounds); MFU against the GEMM peak "
        "of the same dtype; peak memory is the most tensor memory alive during one step above that alive before it "
        "(not measured for onnxruntime, whose memory is its own). onnxruntime-int8 is never the best peer: "
        "its numbers differ from fp32's.",
        "",
        "| model | task | dtype | implementation | best mode | images/s | MFU | peak memory MiB "
        "| all modes (images/s) |",
        "|---|---|---|---|---|---:|---:|---:|---|",
    ]
    for case in results["cases"]:
        for row in case["rows"]:
            modes = ", ".join(f"{mode} {speed:.1f}" for mode, speed in row["modes"].items())
            lines.append(
                f"| {case_name(case)} | {case['task']} | {case['dtype']} | {row['implementation']} | {row['mode']} "
                f"| {row['images_per_s']:.1f} | {fmt(row['mfu'] and 100 * row['mfu'], '.0f', '%')} "
                f"| {fmt(row['peak_memory_mib'], '.0f')} | {modes} |"
            )
    return "\n".join(lines) + "\n"


def write(results: dict, out_dir: str | Path) -> tuple[Path, Path]:
    """bench.json and bench.md in out_dir."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "bench.json", out / "bench.md"
    text = markdown(results)
    json_path.write_text(json.dumps({**results, "markdown": text}, indent=1) + "\n")
    md_path.write_text(text)
    return json_path, md_path
