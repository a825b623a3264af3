"""vitlab against timm on one GPU: ViT-B/16 at 224, bf16, inference and training, eager and compiled.

    PYTHONPATH=src python -m vitlab.bench.gpu --out build/bench-gpu          # on the GPU machine
    PYTHONPATH=src python -m vitlab.bench.gpu --tiny --out build/bench-tiny  # seconds, on a CPU

Reports images/s, peak memory, and model FLOPs utilisation against the bf16 GEMM peak measured on this
GPU (the headline) and, where the GPU is a part whose datasheet figure is known (`spec_peak`), against
that dense bf16 peak, naming the part; --nominal-tflops gives one for another GPU. The modes are the
three a user picks: eager, compile and vitlab's fast inference path; compiled graphs are kept in a
persistent Inductor cache (--inductor-cache), so that a second run on the machine skips the compiles.
Writes bench.json and bench.md like `vitlab bench`, plus summary.txt. It also times the input pipeline
that decodes and augments on the device against the CPU one and compares their outputs (gpu_input.py;
--no-input skips it), and runs a few data-parallel training steps over the trainer's process group,
one process per GPU (ddp.py: ddp.json beside bench.json; --ddp-steps 0 skips it). `vitlab bench
report --runs DIR` puts both in docs/benchmarks.md. vitlab runs from source but imports its
dependencies (pyproject.toml) and timm; on a machine without a network, install them into a folder
beforehand and put it on PYTHONPATH:
`pip install --target DIR --python-version 3.12 --only-binary=:all: timm safetensors ...`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import torch

from .gpu_input import input_section
from .gpu_input import summary_lines as input_summary
from .harness import BenchConfig, CaseSpec, run_bench
from .report import write
from .steps import Case

MODES = ("eager", "compile", "fast")
# Dense bf16 tensor-core peaks (TFLOP/s, without sparsity) from NVIDIA's datasheets, by the part
# torch.cuda.get_device_name names; the first entry whose words all occur in the name applies.
SPEC_BF16_TFLOPS = (
    ("H200 NVL", 835.0),
    ("H200", 989.0),  # H200 SXM
    ("H100 NVL", 835.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),  # H100 SXM5 (HBM3)
    ("A100", 312.0),  # SXM4 and PCIe alike
    ("L40S", 362.0),
    ("L4", 121.0),
    ("A10", 125.0),
)


def spec_peak(gpu_name: str | None) -> tuple[str, float] | None:
    """(part, dense bf16 TFLOP/s) for a GPU named by torch.cuda.get_device_name; None if not known."""
    words = set((gpu_name or "").replace("-", " ").split())
    for part, tflops in SPEC_BF16_TFLOPS:
        if set(part.split()) <= words:
            return part, tflops
    return None


def persistent_inductor_cache(folder: Path) -> None:
    """Keep Inductor's compiled graphs (forward and backward) in `folder` across runs: a rerun loads
    them instead of compiling B/16 again. Set before the first compile; an environment that already
    names a cache keeps its own."""
    folder.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(folder.resolve()))
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")


def gpu_cases(tiny: bool, batch: int) -> list[CaseSpec]:
    variant, size = ("mu/16", 32) if tiny else ("B/16", 224)
    return [CaseSpec(Case(variant, size, batch, "bf16", task), ("vitlab", "timm")) for task in ("infer", "train")]


def summary(results: dict, spec: tuple[str, float] | None) -> list[str]:
    """A line per row: its MFU against the measured bf16 GEMM peak, and against `spec`'s datasheet peak."""
    peak = results["gemm_peak_flops"]["bf16"] / 1e12
    datasheet = f"datasheet dense bf16 peak of the {spec[0]}: {spec[1]:.0f}" if spec else "no datasheet peak known"
    lines = [f"bf16 GEMM peak measured here: {peak:.1f} TFLOP/s; {datasheet}"]
    for case in results["cases"]:
        for row in case["rows"]:
            against_spec = ""
            if spec is not None:
                mfu = case["flops_per_image"] * row["images_per_s"] / (spec[1] * 1e12)
                against_spec = f", {100 * mfu:.1f}% of the {spec[0]}'s {spec[1]:.0f}"
            lines.append(
                f"{case['variant']}@{case['image_size']} {case['task']} bf16 batch {case['batch']}: "
                f"{row['implementation']} {row['mode']} {row['images_per_s']:.1f} images/s, "
                f"MFU {100 * (row['mfu'] or 0):.1f}% of the measured GEMM peak{against_spec}, "
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
    parser.add_argument(
        "--nominal-tflops", type=float, help="the GPU's dense bf16 peak (default: its datasheet's, when known)"
    )
    parser.add_argument("--inductor-cache", default="build/inductor-cache", help="where compiled graphs are kept")
    parser.add_argument("--no-input", action="store_true", help="skip the input pipeline's timing and comparison")
    parser.add_argument("--ddp-steps", type=int, default=10, help="timed data-parallel steps (0: none)")
    parser.add_argument("--out", default="build/bench-gpu")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    persistent_inductor_cache(Path(args.inductor_cache))
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
    gpu = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else None
    spec = ("given part", args.nominal_tflops) if args.nominal_tflops else spec_peak(gpu)
    results["spec_peak"] = {"gpu": gpu, "part": spec[0], "bf16_tflops": spec[1]} if spec else {"gpu": gpu}
    lines = summary(results, spec)
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
