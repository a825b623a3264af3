"""docs/benchmarks.md, assembled from benchmark results (never typed by hand).

    vitlab bench report --runs build/bench/res384.json --out docs/benchmarks.md

copies each given JSON beside the document (into docs/benchmarks/) and renders every JSON there
under a fixed preamble that holds no measured number: one section per CPU kind (name, family and
model, and capability: AVX2 and AVX512 machines run different kernels, and CPUs of one name differ),
one table per run with the line saying where and how loaded it ran. A run that does not say which
CPU it ran on (older ones recorded no family and model) is history: its file is kept, not rendered. Any JSON with the keys "kind",
"machine" and "markdown" is rendered; model-only results (kind "model-only") are re-rendered from
their rows, so every run reads the same way and its sentences and target verdicts are computed from
its numbers.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from .machine import cpu_text
from .report import KIND, machine_line, markdown

REQUIRED = ("kind", "machine", "markdown")

PREAMBLE = """\
# Benchmarks: vitlab against timm, transformers, torchvision, onnxruntime and OpenVINO

```bash
make bench        # the standard preset: vitlab and its peers on Ti/16, S/16, B/16 at 224
make bench-384    # S/16 and B/16 at the paper's fine-tuning resolution, 384 px (577 tokens)
make bench-int8   # vitlab's and onnxruntime's int8 against onnxruntime fp32 and vitlab's fast paths
make bench-pipelines  # JPEG files -> top-5 against timm's pipeline; the training input pipeline per core
make bench-avx2   # the model-only cases with this CPU limited to AVX2 (no native bf16)
python -m vitlab.bench.gpu --out build/bench-gpu  # on a GPU: B/16 against timm, the device input pipeline, DDP
vitlab bench Ti/16:infer:bf16:64 B/16:train:bf16:8:vitlab,timm --image-size 224 --rounds 7
```

Each run writes `NAME.json` (every contender's per-round times, the machine, the rendered tables)
and `NAME.md`, and prints vitlab / best peer per case; `--preset full` tries every mode of every
implementation (`vitlab bench --help`).

## How it is measured (src/vitlab/bench/)

- **Same model everywhere.** Each library builds the same architecture from vitlab's variant table
  with fresh random weights and 1000 classes: `timm.models.vision_transformer.VisionTransformer`,
  `transformers.ViTForImageClassification` with `attn_implementation="eager"` and `"sdpa"`,
  `torchvision.models.vision_transformer.VisionTransformer`, vitlab's `VisionTransformer`, and
  vitlab's model exported to ONNX and run by onnxruntime in float32 and quantized to int8
  (`vitlab export --quantize int8`, src/vitlab/export/quantize.py). `vitlab-int8` is vitlab's own
  int8 path, `optimize_for_inference(model, dtype=torch.int8)` (src/vitlab/accel/int8.py). OpenVINO
  (the `openvino` extra): vitlab's model, `INFERENCE_PRECISION_HINT` the case's dtype,
  `PERFORMANCE_HINT=LATENCY`, one stream, torch's threads, as reported in each row (`runtime_config`).
- **Same work.** Inference: one batch of random images, no autograd. Training step: bf16 autocast
  over fp32 weights, cross-entropy, backward, AdamW step.
- **Each implementation in its best mode**, the fastest of those tried, in the same dtype: eager and
  `torch.compile` (default settings); for bf16 inference also the weights cast to bf16 (`+bf16w`);
  vitlab's `fast` is `vitlab.optimize_for_inference` (frozen, compiled, weights cast once).
  onnxruntime runs fp32 inference in its own optimised session. int8 (vitlab-int8, onnxruntime-int8)
  computes other numbers, so it is shown in the fp32 case but never taken as the best peer. Nor is
  OpenVINO: it has targets of its own (`OPENVINO_TARGETS`), in a table of their own.
- **Timing.** Every contender is built, compiled and warmed up, then all are timed in interleaved
  rounds whose order rotates, so drift on a shared machine hits all alike; a short step is repeated
  within a round to last 0.2 s, after an untimed 0.05 s pause in which the last runtime's spinning
  threads (OpenMP, onnxruntime, OpenVINO) stop. Reported: batch / median seconds per step; at batch 1,
  the median and 90th percentile of single calls. Each table gives the load
  average when its run started: above the core count, other processes take turns on the cores and
  slow implementations unequally (interleaving evens out drift, not that), so ratios are fair only
  from a lightly loaded run.
- **Peak memory**: torch.profiler with `profile_memory=True` replays every allocation and free of
  PyTorch's CPU allocator during one step of the best mode; memory that libraries allocate outside
  PyTorch (oneDNN scratch, onnxruntime) is not counted. On CUDA, the caching allocator's peak.
- **MFU** = model FLOPs per image x images/s / the machine's GEMM peak of the same dtype (the best
  rate of a large GEMM, through `torch.mm` or, on CPU, oneDNN). Where bf16 is emulated, its own GEMM
  is a fallback at about 1 GFLOP/s; bf16 operands widen to fp32 exactly, so the fp32 GEMM's peak is
  the one used. The int8 rows have none (their GEMMs are int8, whose peak is not measured). vitlab
  skips the last layer's non-class rows and its frozen graphs use prepacked kernels, so its MFU
  reads high.
- **Which CPU.** Results are grouped by CPU kind: the name, the vendor's family and model numbers
  (from /proc/cpuinfo) and the capability ATen dispatches to. CPUs sold under one name differ in
  generation, and so in their GEMM peaks and in which kernels are fastest; runs made before the family
  and model were recorded say so. vitlab's measured kernel choices are cached under the same key.
- **Targets.** Each preset states the ratios it must reach (`TARGETS` in src/vitlab/bench/targets.py);
  every table lists them as met / not met from its own numbers. The model-only targets hold each side
  in its best mode, and again each run eagerly: "eager" is the faster of `eager` and `eager+bf16w`,
  and the best PyTorch peer's excludes onnxruntime, whose one session always optimizes the graph.
  A target is judged by the ratio of the two sides' median speeds. Beside it, where both sides were
  timed in the same rounds, the lowest and highest ratio within one round: where the lowest falls
  below the target, the summary says that a rerun may miss it.

## What makes vitlab faster

1. **Class token only in the last layer**: y = LN(z_L^0) reads one row, so the last layer's attention
   takes the class token's query alone and its MLP runs on one token.
2. **Attention as two matmuls around a softmax computed in fp32, on CPU in bf16**
   (`accel/blocked.py`), in blocks of queries; in training the weights are recomputed in backward
   rather than stored. In eager inference the scale rides in the first GEMM (baddbmm's alpha), the
   softmax runs in place over the logits and each block writes its heads already merged.
3. **`vitlab.optimize_for_inference(model, dtype)`** (`accel/fast.py`): eval mode under
   `torch.inference_mode`, weights cast once, compiled with Inductor's freezing and, on CPU, its C++
   wrapper; in fp32 its GEMMs run in the faster of MKL and oneDNN on this CPU (`accel/kernels.py`,
   timed once and cached); in bf16 / fp16 the patch embedding is one GEMM over the copied-out
   patches rather than a convolution (`accel/layers.py`).
   With `dtype=torch.int8` (CPU) the encoder's linears run in oneDNN's int8 kernels, GELU in their
   epilogue, and the rest in bf16 where this CPU has native bf16, else fp32 (`accel/int8.py`).
4. **`--compile` for training** (`vitlab train --compile`), with 1-2 inside the compiled graph.
5. **Eager inference GEMMs in oneDNN** (`accel/layers.py`): bias, and fc1's GELU in bf16, in the
   kernel's epilogue; the patch embedding is one of them. Attention takes whole images at a time, as
   many as keep their logits in the threads' L2 caches. The weights are not cached in oneDNN's layout
   between calls: a change made through `.data` moves no version counter, so a cached copy could go
   stale without a word.
6. **vitlab's own bf16 softmax kernel in eager inference attention** (`accel/softmax.py`,
   `accel/native.py`, `accel/csrc/bf16_kernels.c`): ATen's numbers (fp32 inside, one rounding to
   bf16) with AVX-512 throughout, where ATen's kernel takes each row's last len % 16 values one at a
   time. Built once per machine with the system's C compiler, checked against ATen's before its first
   use and timed against it once; ATen's kernel runs where it cannot (no AVX512_BF16, no compiler) or
   is faster.

**This document is generated.** Everything below the line is rendered from the JSON files in
`docs/benchmarks/`: per CPU kind, named by vendor, family and model, each benchmark's run kept for that
kind, its verdicts (the targets it misses, or may miss on a rerun, by name) and its table of vitlab
against the best peer; each target's ratios, every implementation in every mode and every breakdown
are in the run's JSON, linked beside it. Results whose CPU family and model were not recorded stay in
`docs/benchmarks/` as history and are not rendered. The command:

```bash
{report}
```

and `tests/bench/test_document.py` checks that it is what that command makes.

---
"""


def read_result(path: Path) -> dict:
    """A benchmark JSON with the keys every section needs; a one-line error naming the file otherwise."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a readable benchmark JSON ({error})") from None
    absent = [key for key in REQUIRED if not isinstance(data, dict) or key not in data]
    if absent:
        raise ValueError(f"{path}: not a benchmark result: no {', '.join(map(repr, absent))} key")
    return data


def cpu_kind(machine: dict) -> str:
    """The heading a run goes under: its GPU, or its CPU (name, family and model) and capability."""
    if machine.get("gpu"):
        return f"GPU: {machine['gpu']}"
    return f"CPU: {cpu_text(machine)}, {machine.get('cpu_capability') or 'capability not recorded'}"


def asset_name(file: Path, data: dict, assets: Path) -> str:
    """The name a result is kept under beside the document: its own, unless that holds a result from
    another kind of CPU, which it must not replace; then its own with the CPU kind appended."""
    kind = cpu_kind(data["machine"])
    slug = re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-")
    for name in (file.name, f"{file.stem}-{slug}{file.suffix}"):
        kept = assets / name
        if not kept.exists() or kept.resolve() == file.resolve() or cpu_kind(read_result(kept)["machine"]) == kind:
            return name
    raise ValueError(f"{assets / file.name}: holds results of another CPU than {kind} under both names")


def section(path: Path, data: dict, assets: str) -> str:
    if data["kind"] == KIND:
        preset = data.get("preset")
        title = f"Model only: the `{preset}` preset" if preset else "Model only: chosen cases"
        if data.get("variants"):
            title += f", its {', '.join(data['variants'])} cases only"
        modes = data.get("config", {}).get("modes")
        if not preset and modes:
            title += f", mode{'s' * (len(modes) > 1)} {', '.join(modes)}"
        body = markdown(data, detail=False)
        if data.get("summary"):  # the GPU bench's: MFU against the datasheet peak, the device input pipeline
            body = body.rstrip() + "\n\n" + "\n".join(f"- {line.strip()}" for line in data["summary"])
    else:
        title = data.get("title") or str(data["kind"])
        body = str(data["markdown"]).strip()
        levels = [len(found) for found in re.findall(r"^(#+) ", body, flags=re.MULTILINE)]
        shift = 4 - min(levels) if levels else 0  # its top heading one level below this section's
        body = re.sub(r"^(#+) ", lambda m: "#" * max(1, len(m.group(1)) + shift) + " ", body, flags=re.MULTILINE)
        body = headline(body)
    link = f"{assets}/{path.name}"
    return f"### {title}\n\n{machine_line(data['machine'])} Every number: [`{link}`]({link}).\n\n{body.strip()}"


def names_its_cpu(machine: dict) -> bool:
    """Whether a run says which CPU it ran on: a GPU, or a CPU's vendor, family and model."""
    return bool(machine.get("gpu") or machine.get("cpu_model"))


def headline(body: str) -> str:
    """A result's own markdown up to its first table: what it measured and its main numbers (the
    breakdowns after it are in its JSON)."""
    blocks = body.split("\n\n")
    first_table = next((i for i, block in enumerate(blocks) if block.lstrip().startswith("|")), len(blocks) - 1)
    return "\n\n".join(blocks[: first_table + 1])


def assemble(paths: list[Path], report: str, assets: str = "benchmarks") -> str:
    """The document from the result files `paths` that name their CPU, grouped by CPU kind in the order
    they first appear; the others are history, kept as files and left out."""
    groups: dict[str, list[str]] = {}
    for path in paths:
        data = read_result(path)
        if not names_its_cpu(data["machine"]):
            continue
        groups.setdefault(cpu_kind(data["machine"]), []).append(section(Path(path), data, assets))
    parts = [PREAMBLE.format(report=report).rstrip()]
    if not groups:
        parts.append("**No benchmark results** were found when this document was assembled.")
    for kind, sections in groups.items():
        parts.append(f"## {kind}\n\n" + "\n\n".join(sections))
    return "\n\n".join(parts) + "\n"


def result_files(folder: Path) -> list[Path]:
    return sorted(Path(folder).glob("*.json"))


def write_document(runs: list[Path], out: Path) -> Path:
    """Copy each result in `runs` (JSON files, or folders of them) beside `out` and write `out` from
    every result there, the earlier ones kept."""
    out = Path(out)
    assets = out.parent / out.stem  # docs/benchmarks.md -> docs/benchmarks/
    files = [file for run in map(Path, runs) for file in (result_files(run) if run.is_dir() else [run])]
    results = [(file, read_result(file)) for file in files]  # every input checked before anything is copied
    assets.mkdir(parents=True, exist_ok=True)
    for file, data in results:
        kept = assets / asset_name(file, data, assets)
        if file.resolve() != kept.resolve():
            shutil.copyfile(file, kept)
    report = f"vitlab bench report --runs {assets.as_posix()} --out {out.as_posix()}"
    out.write_text(assemble(result_files(assets), report, assets.name))
    return out
