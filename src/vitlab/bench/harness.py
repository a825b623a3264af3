"""The side-by-side benchmark: vitlab and its peers on the same cases, in the same run.

For each case every implementation is built at the same size, run in each of its modes (warm-up
first, which is also where torch.compile compiles), then all contenders are timed in interleaved
rounds, with a pause between samples (settle_s, untimed) so that the thread pool of the runtime just
timed (OpenMP's, onnxruntime's, OpenVINO's) stops spinning before the next one starts. Each implementation is reported in its best mode (highest median images/s), with the peak
memory of one step in that mode and its model FLOPs utilisation against this machine's GEMM peak
(onnxruntime's memory is its own, outside PyTorch's allocator: not measured). Every call is also
timed on its own: the median and 90th percentile of those are the latency, the row a batch-1 case
reports (what serving one image costs).
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import asdict, dataclass, field

import torch

from vitlab.accel.kernels import native
from vitlab.model import config_for

from .flops import model_flops
from .implementations import FAST_DTYPES, IMPLEMENTATIONS, OTHER_NUMERICS, OWN_TARGETS, RUNTIMES, build
from .machine import capability_text, describe, gemm_peak, load_average, utilisation
from .memory import step_peak_bytes
from .report import gflops
from .steps import DTYPES, Case, Mode, make_step
from .timing import calls_per_sample, each_call, interleaved, latency_ms, time_once

log = logging.getLogger("vitlab")

ALL_MODES = ("eager", "compile", "eager+bf16w", "compile+bf16w", "fast")


@dataclass(frozen=True)
class CaseSpec:
    """A case, the implementations that run it and the modes they try (empty: all of them)."""

    case: Case
    implementations: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str, image_size: int = 224, batch: int = 32) -> CaseSpec:
        """VARIANT:TASK:DTYPE[:BATCH[:IMPL,IMPL...]], e.g. "S/16:infer:bf16" or "B/16:train:bf16:8:vitlab,timm"."""
        parts = text.split(":")
        if not 3 <= len(parts) <= 5:
            raise ValueError(f"case {text!r} is not VARIANT:TASK:DTYPE[:BATCH[:IMPLS]] (e.g. 'Ti/16:infer:bf16')")
        if len(parts) > 3 and not parts[3].isdigit():
            raise ValueError(f"batch {parts[3]!r} in case {text!r} is not a positive integer")
        config_for(parts[0])  # names a bad variant now rather than mid-run
        implementations = tuple(name for name in parts[4].split(",") if name) if len(parts) > 4 else ()
        for name in implementations:
            if name not in IMPLEMENTATIONS:
                raise ValueError(
                    f"unknown implementation {name!r} in case {text!r}; choose from {', '.join(IMPLEMENTATIONS)}"
                )
        case = Case(parts[0], image_size, int(parts[3]) if len(parts) > 3 else batch, parts[2], parts[1])
        return cls(case, implementations)


@dataclass
class BenchConfig:
    cases: list[CaseSpec]
    implementations: tuple[str, ...] = tuple(IMPLEMENTATIONS)
    modes: tuple[str, ...] | None = None  # for every case, overriding the cases' own
    rounds: int = 5
    warmup: int = 2
    min_sample_s: float = 0.2  # steps shorter than this are repeated within one timed sample
    settle_s: float = 0.05  # untimed pause before each sample: the last runtime's threads stop spinning
    device: str = "cpu"
    memory: bool = True
    gemm_sizes: tuple[int, ...] = (1024, 2048)

    def __post_init__(self) -> None:
        for name in self.implementations:
            if name not in IMPLEMENTATIONS:
                raise ValueError(f"unknown implementation {name!r}; choose from {', '.join(IMPLEMENTATIONS)}")
        for spec in self.cases:
            for name in (*spec.modes, *(self.modes or ())):
                Mode.parse(name)
        if self.rounds < 1 or self.warmup < 1:
            raise ValueError(f"rounds ({self.rounds}) and warmup ({self.warmup}) must be at least 1")


@dataclass
class Contender:
    implementation: str
    mode: str
    setup_s: float  # build + warm-up (+ compilation)
    calls: int = 1  # steps per timed sample
    seconds: list[float] = field(default_factory=list)  # per step, one per round
    images_per_s: float = 0.0  # batch / median seconds
    latency_ms: dict[str, float] | None = None  # median and p90 of single calls, in ms
    runtime_config: dict[str, str] | None = None  # what a runtime of its own reports it runs with
    error: str | None = None


@dataclass
class Row:
    """One implementation in its best mode."""

    implementation: str
    mode: str
    images_per_s: float
    modes: dict[str, float]  # images/s of every mode tried
    peak_memory_mib: float | None
    mfu: float | None
    latency_ms: dict[str, float] | None = None  # of the best mode: median and p90 of single calls, in ms
    runtime_config: dict[str, str] | None = None  # of the best mode, where the implementation reports one


@dataclass
class CaseResult:
    case: Case
    flops_per_image: int
    rows: list[Row]
    contenders: list[Contender]
    load_average: list[float] | None

    def row(self, implementation: str) -> Row | None:
        return next((row for row in self.rows if row.implementation == implementation), None)

    @property
    def best_peer(self) -> Row | None:
        peers = [row for row in self.rows if row.implementation not in ("vitlab", *OTHER_NUMERICS, *OWN_TARGETS)]
        return max(peers, key=lambda row: row.images_per_s) if peers else None

    def ratio(self, peer: str | None = None) -> float | None:
        """vitlab's images/s over the best peer's (or over `peer`'s)."""
        mine = self.row("vitlab")
        other = self.row(peer) if peer else self.best_peer
        if mine is None or other is None:
            return None
        return mine.images_per_s / other.images_per_s


def prepare(case: Case, implementation: str, mode: Mode, config: BenchConfig, device: torch.device):
    """Build, compile and warm up one contender; (step or None if it failed, Contender)."""
    start = time.perf_counter()
    torch.manual_seed(0)
    model_config = config_for(case.variant, image_size=case.image_size)
    try:
        model = build(implementation, model_config)
        step = make_step(model, case, mode, device, model_config.num_classes, FAST_DTYPES.get(implementation))
        warm = [time_once(step, device) for _ in range(config.warmup)]
    except Exception as error:  # a peer that cannot run a mode (e.g. fails to compile) is reported, not fatal
        first_line = str(error).splitlines()[0] if str(error) else repr(error)
        log.warning("  %s %s failed: %s", implementation, mode.name, first_line)
        return None, Contender(implementation, mode.name, time.perf_counter() - start, error=repr(error)[:300])
    calls = calls_per_sample(warm, config.min_sample_s)
    runtime_config = getattr(model, "runtime_config", None)
    return step, Contender(implementation, mode.name, time.perf_counter() - start, calls, runtime_config=runtime_config)


def run_case(spec: CaseSpec, config: BenchConfig, device: torch.device, peak: dict[str, float]) -> CaseResult:
    case, start = spec.case, time.perf_counter()
    wanted = spec.implementations or config.implementations
    implementations = [name for name in wanted if name in config.implementations]
    log.info("%s: %s", case.label, ", ".join(implementations))
    torch._dynamo.reset()  # each case compiles afresh, clear of the recompilation limit
    steps, contenders = {}, {}
    for implementation in implementations:
        modes = ("eager",) if implementation in RUNTIMES else config.modes or spec.modes or ALL_MODES
        for mode in map(Mode.parse, modes):
            if not mode.applies_to(case, implementation, modes):
                continue
            step, contender = prepare(case, implementation, mode, config, device)
            key = f"{implementation} {mode.name}"
            contenders[key] = contender
            if step is not None:
                steps[key] = step
                log.info("  ready %-24s in %5.1f s", key, contender.setup_s)
    calls: dict[str, list[float]] = {key: [] for key in steps}
    timed = {key: each_call(step, contenders[key].calls, device, calls[key]) for key, step in steps.items()}
    for key, seconds in interleaved(timed, config.rounds, device, config.settle_s).items():
        contender = contenders[key]
        contender.seconds = [value / contender.calls for value in seconds]
        contender.images_per_s = case.batch / statistics.median(contender.seconds)
        contender.latency_ms = latency_ms(calls[key])

    flops = model_flops(config_for(case.variant, image_size=case.image_size), train=case.task == "train")
    rows = []
    for implementation in implementations:
        tried = {
            c.mode: c.images_per_s for c in contenders.values() if c.implementation == implementation and not c.error
        }
        if not tried:
            continue
        best = max(tried, key=lambda mode: tried[mode])
        memory = None
        if config.memory and implementation not in RUNTIMES:
            memory = step_peak_bytes(steps[f"{implementation} {best}"], device) / 2**20
        mfu = utilisation(flops, tried[best], case.dtype, peak, implementation in OTHER_NUMERICS)
        chosen = contenders[f"{implementation} {best}"]
        rows.append(
            Row(implementation, best, tried[best], tried, memory, mfu, chosen.latency_ms, chosen.runtime_config)
        )
    result = CaseResult(case, flops, rows, list(contenders.values()), load_average())
    for row in rows:
        latency = (
            f", {row.latency_ms['median']:.2f} ms median, {row.latency_ms['p90']:.2f} ms p90" if row.latency_ms else ""
        )
        log.info("  %-12s %-14s %8.1f images/s%s", row.implementation, row.mode, row.images_per_s, latency)
    ratio, best_peer = result.ratio(), result.best_peer
    if ratio is not None and best_peer is not None:  # a ratio needs a peer
        log.info("  vitlab / best peer (%s): %.2fx", best_peer.implementation, ratio)
    log.info("  (%.0f s)", time.perf_counter() - start)
    return result


def gemm_sizes(config: BenchConfig, dtype: torch.dtype, device: torch.device) -> tuple[int, ...]:
    """The GEMM peak's sizes; the smallest alone where the CPU emulates `dtype` (a 2048 x 2048 product
    then takes seconds, at the same rate)."""
    if device.type == "cpu" and not native(dtype):
        return config.gemm_sizes[:1]
    return config.gemm_sizes


def run_bench(config: BenchConfig) -> dict:
    """Run every case; the results as a JSON-ready dict."""
    device = torch.device(config.device)
    machine = describe(device)
    log.info("CPU capability %s", capability_text(machine))
    log.info("GEMM peak on %s ...", machine["cpu"] if device.type == "cpu" else machine.get("gpu"))
    peak = {name: gemm_peak(dtype, device, gemm_sizes(config, dtype, device)) for name, dtype in DTYPES.items()}
    log.info("  " + ", ".join(f"{name} {gflops(value)} GFLOP/s" for name, value in peak.items()))
    results = [run_case(spec, config, device, peak) for spec in config.cases]
    return {
        "kind": "model-only",  # the model's step alone: no data loading
        "machine": machine,
        "gemm_peak_flops": peak,
        "config": {**asdict(config), "cases": [asdict(spec) for spec in config.cases]},
        "cases": [case_to_dict(result) for result in results],
    }


def case_to_dict(result: CaseResult) -> dict:
    best_peer = result.best_peer
    return {
        **asdict(result.case),
        "flops_per_image": result.flops_per_image,
        "load_average": result.load_average,
        "rows": [asdict(row) for row in result.rows],
        "contenders": [asdict(contender) for contender in result.contenders],
        "best_peer": best_peer.implementation if best_peer else None,
        "vitlab_over_best_peer": result.ratio(),
        "vitlab_over_timm": result.ratio("timm"),
    }
