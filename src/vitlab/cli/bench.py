"""`vitlab bench`: vitlab against timm, transformers and torchvision, side by side."""

from __future__ import annotations

import argparse
import logging

from vitlab.errors import InputError

from . import COMMANDS, with_examples, worker_count

REPORT = "report"  # not a case: assembles docs/benchmarks.md from result JSON files
EXAMPLES = (  # the end of --help
    "vitlab bench Ti/16:infer:fp32",
    "vitlab bench B/16:train:bf16:8:vitlab,timm --device cuda",
    "vitlab bench report --runs build/bench/res384.json --out docs/benchmarks.md",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    from vitlab.bench.harness import ALL_MODES
    from vitlab.bench.implementations import IMPLEMENTATIONS
    from vitlab.bench.input_pipeline import PIPELINES as TRAIN_PIPELINES
    from vitlab.bench.pipeline import PIPELINES as PREDICT_PIPELINES
    from vitlab.bench.presets import PRESETS

    parser = subparsers.add_parser(
        "bench",
        **with_examples(*EXAMPLES),
        help=COMMANDS["bench"].help,
        description="Each case is VARIANT:TASK:DTYPE[:BATCH[:IMPL,IMPL...]], e.g. Ti/16:infer:bf16 or "
        "B/16:train:bf16:8:vitlab,timm; TASK is infer or train, DTYPE fp32 or bf16. A preset's run writes "
        "PRESET.json and PRESET.md, chosen cases bench.json and bench.md. `vitlab bench report --runs JSON... "
        "--out docs/benchmarks.md` copies the results beside the document and renders every result there.",
    )
    parser.add_argument("cases", nargs="*", metavar="CASE", help=f"cases to run (default: the --preset), or {REPORT!r}")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="standard", help="named set of cases")
    parser.add_argument("--variants", help="comma-separated variants: only the --preset's cases of these (e.g. Ti/16)")
    parser.add_argument("--image-size", type=int, default=224, help="resolution of the CASEs (default 224)")
    parser.add_argument("--batch", type=int, default=32, help="batch of CASEs that name none (default 32)")
    parser.add_argument("--impls", default=",".join(IMPLEMENTATIONS), help="comma-separated implementations")
    parser.add_argument(
        "--modes",
        help=f"comma-separated modes to try, of {', '.join(ALL_MODES)} (default: the preset's per case, or all)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timed rounds (default 5)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per contender (default 2)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory step")
    parser.add_argument("--out", help="folder for the results (default build/bench); for report: the document")
    parser.add_argument("--runs", nargs="+", help="report: result JSON files, or folders of them")
    parser.add_argument(
        "--pipeline",
        choices=(*PREDICT_PIPELINES, *TRAIN_PIPELINES),
        help="instead: predict is files on disk -> top-5, vitlab's predict pipeline against timm's (pipeline.json, "
        "pipeline.md in --out; --rounds, --threads, --workers apply); train-input is vitlab's training input "
        "against timm's, per core (train-input.json/.md; --rounds and --out apply; python -m "
        "vitlab.bench.input_pipeline --help lists the rest)",
    )
    parser.add_argument(
        "--pipeline-files", type=int, default=512, metavar="N", help="JPEGs for --pipeline (default 512)"
    )
    parser.add_argument(
        "--workers", type=worker_count(), default=1, help="DataLoader workers of each --pipeline (default 1)"
    )
    parser.set_defaults(func=run)


def report(args: argparse.Namespace) -> int:
    from vitlab.bench.document import write_document

    if args.cases != [REPORT] or not args.runs or not args.out:
        raise InputError("usage: vitlab bench report --runs JSON... --out DOCUMENT.md (no cases)")
    print(f"wrote {write_document(args.runs, args.out)}")
    return 0


def run(args: argparse.Namespace) -> int:
    import torch

    from vitlab.bench import run_bench, write
    from vitlab.bench.machine import capability_text
    from vitlab.bench.presets import INT8_ACCURACY_PRESETS, misfit
    from vitlab.bench.report import with_document_keys

    if REPORT in args.cases:
        return report(args)
    if args.runs:
        raise InputError("--runs belongs to `vitlab bench report`")
    args.out = args.out or "build/bench"
    if args.pipeline and args.cases:
        raise InputError(f"--pipeline {args.pipeline} times an input pipeline, not the CASEs {' '.join(args.cases)}")
    if args.pipeline == "train-input":
        from vitlab.bench.input_pipeline import main as pipeline_main

        return pipeline_main(["--rounds", str(args.rounds), "--out", args.out])
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.pipeline:
        return run_pipeline(args)
    config, wanted = bench_config(args)
    preset = None if args.cases else args.preset
    if preset and (why := misfit(preset)):
        logging.getLogger("vitlab").warning(why)
    results = run_bench(config)
    if preset in INT8_ACCURACY_PRESETS:
        from vitlab.bench.int8_accuracy import int8_accuracy

        results["int8_accuracy"] = int8_accuracy()
    if args.variants:
        results["variants"] = wanted
    results = with_document_keys(results, preset)
    json_path, md_path = write(results, args.out, preset or "bench")
    print(f"CPU capability {capability_text(results['machine'])}")
    for case in results["cases"]:
        ratio = case["vitlab_over_best_peer"]
        if ratio is not None:
            print(
                f"{case['variant']}@{case['image_size']} {case['task']} {case['dtype']}: "
                f"vitlab / best peer ({case['best_peer']}) = {ratio:.2f}x"
            )
    print(f"wrote {json_path} and {md_path}")
    return 0


def bench_config(args: argparse.Namespace):
    """The BenchConfig of the CASEs named (else the preset's), only those of --variants; with those variants."""
    from vitlab.bench import PRESETS, BenchConfig, CaseSpec

    specs = (
        [CaseSpec.parse(text, args.image_size, args.batch) for text in args.cases]
        if args.cases
        else PRESETS[args.preset]()
    )
    wanted: list[str] = []
    if args.variants:
        wanted = [name for name in args.variants.split(",") if name]
        specs = [spec for spec in specs if spec.case.variant in wanted]
        if not specs:
            raise InputError(f"--variants {args.variants}: no case of the run is of these variants")
    config = BenchConfig(
        cases=specs,
        implementations=tuple(name for name in args.impls.split(",") if name),
        modes=tuple(name for name in args.modes.split(",") if name) if args.modes else None,
        rounds=args.rounds,
        warmup=args.warmup,
        device=args.device,
        memory=not args.no_memory,
    )
    return config, wanted


def run_pipeline(args: argparse.Namespace) -> int:
    from pathlib import Path

    from vitlab.bench.pipeline import PipelineConfig, run_pipeline

    config = PipelineConfig(files=args.pipeline_files, workers=args.workers, rounds=args.rounds, threads=args.threads)
    results = run_pipeline(config, Path(args.out))
    print(results["markdown"])
    print(f"wrote {Path(args.out) / 'pipeline.json'} and {Path(args.out) / 'pipeline.md'}")
    return 0
