"""The first command to run on a machine with GPUs: does vitlab train, predict, evaluate and export
there, with every GPU the machine shows, in a few minutes.

    python -m vitlab.bench.gpu_check --out build/gpu-check
    python -m vitlab.bench.gpu_check --device cpu --out build/gpu-check   # the same parts, on CPUs (gloo)

Parts, each a `vitlab` command as a user types it, in order (--parts picks some):

- setup: torch, CUDA and NCCL versions, the GPUs torch sees;
- train: a short run of a small ViT on digits under torchrun, one process per GPU (nccl, through the
  trainer's cpu:gloo,cuda:nccl group; on one GPU a single process), with an evaluation and a checkpoint;
- resume: the same run continued for more steps from its checkpoint, on the same processes;
- decode: a short run over JPEG files with --gpu-decode and two loader workers;
- predict, eval, export: the trained model folder on the device (export traces on the CPU, as
  `vitlab export` always does, and checks the ONNX file against the model);
- ddp: data-parallel steps of the bench (ddp.py): DDP's gradients against one model's, and the
  trainer's own collectives each step.

Writes OUT/check.json (each part's command, exit status, seconds and last lines of output) and
OUT/summary.txt; the exit status is 1 when a part failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

PARTS = ("setup", "train", "resume", "decode", "predict", "eval", "export", "ddp")
TRAIN = ["--recipe", "demo", "--model", "mu/4", "--image-size", "8", "--data", "digits", "--batch-size", "64"]


def setup_lines(device: str) -> list[str]:
    lines = [f"torch {torch.__version__}, CUDA {torch.version.cuda}, device {device}"]
    if device == "cuda":
        nccl = torch.cuda.nccl.version() if torch.distributed.is_nccl_available() else None
        lines.append(f"NCCL {'.'.join(map(str, nccl)) if nccl else 'not available'}")
        for index in range(torch.cuda.device_count()):
            properties = torch.cuda.get_device_properties(index)
            memory = properties.total_memory / 2**30
            lines.append(
                f"cuda:{index} {properties.name}, {memory:.0f} GiB, compute capability {properties.major}.{properties.minor}"
            )
        lines.append(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(not set)')}")
    return lines


def commands(out: Path, device: str, processes: int) -> dict[str, list[str]]:
    """Each part's command line."""
    vitlab = [sys.executable, "-m", "vitlab"]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
    run = out / "train"
    common = ["--device", device, "--out", str(run), "--eval-every", "10", "--ckpt-every-steps", "10"]
    images = out / "images"
    return {
        "train": [*launcher, "-m", "vitlab", "train", *TRAIN, *common, "--steps", "20"],
        "resume": [*launcher, "-m", "vitlab", "train", *TRAIN, *common, "--steps", "30", "--resume"],
        "decode": [
            *vitlab,
            "train",
            *TRAIN[:6],
            "--data",
            f"imagefolder:{images}",
            "--batch-size",
            "16",
            "--steps",
            "4",
            "--gpu-decode",
            "--workers",
            "2",
            "--device",
            device,
            "--out",
            str(out / "decode"),
        ],
        "predict": [
            *vitlab,
            "predict",
            "--ckpt",
            str(run),
            "--device",
            device,
            "--out",
            str(out / "top.csv"),
            str(images),
        ],
        "eval": [*vitlab, "eval", "--ckpt", str(run), "--device", device, "--out", str(out / "eval.json")],
        "export": [*vitlab, "export", "--ckpt", str(run), "--format", "onnx", "--out", str(out / "model.onnx")],
        "ddp": [*launcher, "-m", "vitlab.bench.ddp", "--tiny", "--device", device, "--steps", "3", "--out", str(out)],
    }


def run_part(name: str, command: list[str], timeout: float) -> dict:
    started = time.perf_counter()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        status, output = result.returncode, result.stdout + result.stderr
    except subprocess.TimeoutExpired as expired:
        written = [
            part.decode(errors="replace") if isinstance(part, bytes) else part or ""
            for part in (expired.output, expired.stderr)
        ]
        status, output = None, "".join(written) + f"\nstopped after {timeout:.0f} s"
    seconds = time.perf_counter() - started
    tail = [line for line in str(output).splitlines() if line.strip()][-12:]
    return {"part": name, "command": command, "status": status, "seconds": round(seconds, 1), "tail": tail}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vitlab.bench.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--timeout", type=float, default=120, help="seconds each part may take")
    parser.add_argument("--out", default="build/gpu-check")
    args = parser.parse_args(argv)
    parts = [name for name in args.parts.split(",") if name]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts {','.join(unknown)}: choose from {', '.join(PARTS)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA GPU here (run with --device cpu to check the rest)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    processes = min(torch.cuda.device_count(), 8) if args.device == "cuda" else 2
    if {"decode", "predict"} & set(parts) and not (out / "images").is_dir():
        from .input_pipeline import write_photos

        write_photos(out / "images", 32, classes=2)
    lines = setup_lines(args.device) if "setup" in parts else []
    results, every = [], commands(out, args.device, processes)
    for name in parts:
        if name == "setup":
            continue
        result = run_part(name, every[name], args.timeout)
        results.append(result)
        verdict = "ok" if result["status"] == 0 else f"FAILED (exit status {result['status']})"
        lines.append(f"{name}: {verdict} in {result['seconds']:.0f} s")
        if result["status"] != 0:
            lines += [f"  {line}" for line in result["tail"]]
    (out / "check.json").write_text(json.dumps({"device": args.device, "setup": lines, "parts": results}, indent=1))
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(result["status"] == 0 for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
