"""vitlab against timm on one GPU: ViT-B/16 at 224, bf16, inference and training, eager and compiled.

    PYTHONPATH=src python -m vitlab.bench.gpu --out build/bench-gpu          # on the GPU machine
    PYTHONPATH=src python -m vitlab.bench.gpu --tiny --out build/bench-tiny  # seconds, on a CPU

Reports images/s, peak memory, and model FLOPs utilisation against both the measured bf16 GEMM peak
and the GPU's nominal dense bf16 peak (H200: ~790 TFLOP/s, pass --nominal-tflops for another GPU).
Writes bench.json and bench.md like `vitlab bench`, plus summary.txt with the MFU against the
nominal peak. It also times the input pipeline that decodes and augments on the device against the CPU
one and compares their outputs (gpu_input.py; --no-input skips it), and runs a few data-parallel
training steps over nccl, one process per GPU, with their gradient check (ddp.py: ddp.json beside
bench.json; --ddp-steps 0 skips it). `vitlab bench report --runs DIR` puts both in docs/benchmarks.md.
vitlab runs from source but imports its dependencies (pyproject.toml) and timm; on a machine
without a network, install them into a folder beforehand and put it on PYTHONPATH:
`pip install --target DIR --python-version 3.12 --only-binary=:all: timm safetensors ...`.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from pathlib import Path

import torch

from .gpu_input import input_section
from .gpu_input import summary_lines as input_summary
from .harness import BenchConfig, CaseSpec, run_bench
from .report import write
from .steps import Case

H200_BF16_TFLOPS = 790.0  # the dense bf16 peak MFU is quoted against for an H200; --nominal-tflops changes it
MODES = ("eager", "compile", "eager+bf16w", "compile+bf16w", "fast")


def gpu_cases(tiny: bool, batch: int) -> list[CaseSpec]:
    variant, size = ("mu/16", 32) if tiny else ("B/16", 224)
    return [CaseSpec(Case(variant, size, batch, "bf16", task), ("vitlab", "timm")) for task in ("infer", "train")]


def summary(results: dict, nominal_tflops: float) -> list[str]:
    lines = []
    for case in results["cases"]:
        for row in case["rows"]:
            nominal_mfu = case["flops_per_image"] * row["images_per_s"] / (nominal_tflops * 1e12)
            lines.append(
                f"{case['variant']}@{case['image_size']} {case['task']} bf16 batch {case['batch']}: "
                f"{row['implementation']} {row['mode']} {row['images_per_s']:.1f} images/s, "
                f"MFU {100 * nominal_mfu:.1f}% of {nominal_tflops:.0f} TFLOP/s "
                f"({100 * row['mfu']:.1f}% of the measured GEMM peak), "
                f"peak memory {row['peak_memory_mib']:.0f} MiB"
            )
        if case["vitlab_over_timm"] is not None:
            lines.append(f"  vitlab / timm = {case['vitlab_over_timm']:.2f}x")
    return lines


def data_parallel(out: Path, device: torch.device, tiny: bool, steps: int) -> tuple[list[str], bool]:
    """ddp.py under torchrun, one process per GPU (two on a CPU); its summary lines and whether it passed."""
    processes = torch.cuda.device_count() if device.type == "cuda" else 2
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    command += ["-m", "vitlab.bench.ddp", "--device", device.type, "--steps", str(steps), "--out", str(out)]
    written = out / "ddp.json"
    written.unlink(missing_ok=True)  # an earlier run's would pass for this one's
    status = subprocess.run([*command, *(["--tiny"] if tiny else [])]).returncode
    if not written.is_file():
        return [f"data-parallel steps: exit status {status}, no ddp.json (its log is above)"], False
    result = json.loads(written.read_text())
    check, timing = result["check"], result["timing"]
    line = (
        f"data-parallel {result['variant']}@{result['image_size']} over {result['backend']}, "
        f"{result['world_size']} process(es) x {result['batch_per_process']} images: {timing['step_ms']:.1f} ms "
        f"per step, {timing['images_per_s']:.1f} images/s; gradient check "
        f"{'passed' if check['passed'] else 'FAILED'} ({check['max_difference']:.1e} of the largest gradient)"
    )
    return [line], check["passed"] and status == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vitlab.bench.gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny model at 32 px: checks the script on any machine")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, help="images per step (default 256 on a GPU, 2 with --tiny)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated modes to try")
    parser.add_argument("--nominal-tflops", type=float, default=H200_BF16_TFLOPS)
    parser.add_argument("--no-input", action="store_true", help="skip the input pipeline's timing and comparison")
    parser.add_argument("--ddp-steps", type=int, default=10, help="timed data-parallel steps (0: none)")
    parser.add_argument("--out", default="build/bench-gpu")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    batch = args.batch or (2 if args.tiny else 256)
    config = BenchConfig(
        cases=gpu_cases(args.tiny, batch),
        implementations=("vitlab", "timm"),
        modes=tuple(name for name in args.modes.split(",") if name),
        rounds=args.rounds,
        warmup=3,
        device=args.device,
        gemm_sizes=(256,) if args.tiny else (8192,),
    )
    results = run_bench(config)
    lines = summary(results, args.nominal_tflops)
    if not args.no_input:
        results["input_pipeline"] = input_section(Path(args.out) / "images", torch.device(args.device), args.tiny)
        lines += input_summary(results["input_pipeline"])
    results["summary"] = lines
    json_path, md_path = write(results, args.out)
    passed = True
    if args.ddp_steps:
        ddp_lines, passed = data_parallel(Path(args.out), torch.device(args.device), args.tiny, args.ddp_steps)
        lines += ddp_lines
    (Path(args.out) / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {json_path}, {md_path} and summary.txt")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
