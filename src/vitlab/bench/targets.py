"""The speed targets a preset is held to, checked on a run's own numbers (never typed by hand).

A target is a ratio of two rows of one run, e.g. vitlab over the best peer in the same case, or
vitlab's int8 path in the fp32 case over its bf16 fast path, and the least it must be. A target reads
the case of its batch, where it names one (LATENCY_BATCH: what serving one image costs), else the
case at the preset's throughput batch, which is never LATENCY_BATCH.
"""

from __future__ import annotations

from dataclasses import dataclass

from .implementations import OPENVINO, OTHER_NUMERICS, RUNTIMES

BEST_PEER = "best peer"  # a Side's implementation: the case's fastest peer in its best mode
LATENCY_BATCH = 1
EAGER = "eager*"  # a Side's mode: the fastest of its eager modes (eager, eager+bf16w); with BEST_PEER, of
# the PyTorch peers' (onnxruntime has no eager mode: its one session optimizes the graph)


@dataclass(frozen=True)
class Side:
    task: str  # infer | train
    dtype: str  # fp32 | bf16
    implementation: str  # a name of IMPLEMENTATIONS, or BEST_PEER
    mode: str | None = None  # that mode's speed; None: the implementation's best mode

    def __str__(self) -> str:
        if self.mode == EAGER:
            name = "best PyTorch peer" if self.implementation == BEST_PEER else self.implementation
            return f"{name} eager ({self.dtype} {self.task})"
        mode = f" {self.mode}" if self.mode else ""
        return f"{self.implementation}{mode} ({self.dtype} {self.task})"

    def case(self, cases: list[dict], variant: str, image_size: int, batch: int | None = None) -> dict | None:
        """The run's case (JSON dict) this side is read from, at `batch` (None: at any batch but
        LATENCY_BATCH); None when the run lacks it."""
        wanted = (variant, image_size, self.task, self.dtype)
        return next(
            (
                c
                for c in cases
                if (c["variant"], c["image_size"], c["task"], c["dtype"]) == wanted
                and (c.get("batch") == batch if batch is not None else c.get("batch") != LATENCY_BATCH)
            ),
            None,
        )

    def choice(self, case: dict) -> tuple[str, str] | None:
        """The (implementation, mode) this side stands for in `case`."""
        if self.mode == EAGER:
            return eager_choice(case["rows"], self.implementation)
        name = case["best_peer"] if self.implementation == BEST_PEER else self.implementation
        row = next((row for row in case["rows"] if row["implementation"] == name), None)
        if row is None:
            return None
        mode = self.mode or max(row["modes"], key=row["modes"].get)
        return (name, mode) if mode in row["modes"] else None

    def speed(self, cases: list[dict], variant: str, image_size: int, batch: int | None = None) -> float | None:
        """images/s of this side in the run's `cases`; None when the run lacks it."""
        case = self.case(cases, variant, image_size, batch)
        choice = self.choice(case) if case else None
        if case is None or choice is None:
            return None
        row = next(row for row in case["rows"] if row["implementation"] == choice[0])
        return row["modes"][choice[1]] if self.mode else row["images_per_s"]


def eager_choice(rows: list[dict], implementation: str) -> tuple[str, str] | None:
    """The fastest eager mode of `implementation`, or of the PyTorch peers (BEST_PEER)."""
    if implementation == BEST_PEER:
        excluded = ("vitlab", *RUNTIMES, *OTHER_NUMERICS)
        chosen = [row for row in rows if row["implementation"] not in excluded]
    else:
        chosen = [row for row in rows if row["implementation"] == implementation]
    eager = [(row["implementation"], mode, speed) for row in chosen for mode, speed in row["modes"].items()]
    eager = [entry for entry in eager if entry[1].split("+")[0] == "eager"]
    fastest = max(eager, key=lambda entry: entry[2], default=None)
    return fastest and fastest[:2]


@dataclass(frozen=True)
class Target:
    variant: str
    image_size: int
    numerator: Side
    denominator: Side
    at_least: float
    batch: int | None = None  # the case's batch where the target names one (LATENCY_BATCH)

    @property
    def label(self) -> str:
        batch = f" batch {self.batch}" if self.batch is not None else ""
        return f"{self.variant} @{self.image_size}{batch}: {self.numerator} / {self.denominator} >= {self.at_least:g}x"

    def ratio(self, cases: list[dict]) -> float | None:
        """The ratio of the two sides' speeds (each the median over the run's rounds)."""
        top = self.numerator.speed(cases, self.variant, self.image_size, self.batch)
        bottom = self.denominator.speed(cases, self.variant, self.image_size, self.batch)
        return None if top is None or bottom is None else top / bottom

    def round_ratios(self, cases: list[dict]) -> list[float] | None:
        """The ratio within each interleaved round, where both sides were timed in the same rounds (one
        case): the spread says how far the run's noise reaches. None across cases (int8 over bf16)."""
        top_case = self.numerator.case(cases, self.variant, self.image_size, self.batch)
        if top_case is None or top_case is not self.denominator.case(cases, self.variant, self.image_size, self.batch):
            return None
        top, bottom = self.numerator.choice(top_case), self.denominator.choice(top_case)
        timed = {(c["implementation"], c["mode"]): c.get("seconds") for c in top_case.get("contenders", [])}
        if not (top and bottom and timed.get(top) and timed.get(bottom)):
            return None
        return [slow / fast for fast, slow in zip(timed[top], timed[bottom], strict=True)]


def versus_best_peer(variant: str, image_size: int, task: str, dtype: str, at_least: float) -> Target:
    return Target(variant, image_size, Side(task, dtype, "vitlab"), Side(task, dtype, BEST_PEER), at_least)


def int8_targets(variant: str, image_size: int) -> tuple[Target, ...]:
    """int8 at least twice vitlab's fp32 fast path and not slower than its bf16 one."""
    int8 = Side("infer", "fp32", "vitlab-int8")
    return (
        Target(variant, image_size, int8, Side("infer", "fp32", "vitlab", "fast"), 2.0),
        Target(variant, image_size, int8, Side("infer", "bf16", "vitlab", "fast"), 1.0),
    )


def model_only_targets() -> tuple[Target, ...]:
    """bf16 inference >= 1.2x the best peer, fp32 >= 0.95x, the bf16 training step >= 1.1x timm's: each
    side in its best mode, then each run eagerly."""
    return tuple(
        target
        for mode in (None, EAGER)
        for variant in ("Ti/16", "S/16")
        for target in (
            Target(variant, 224, Side("infer", "bf16", "vitlab", mode), Side("infer", "bf16", BEST_PEER, mode), 1.2),
            Target(variant, 224, Side("infer", "fp32", "vitlab", mode), Side("infer", "fp32", BEST_PEER, mode), 0.95),
            Target(variant, 224, Side("train", "bf16", "vitlab", mode), Side("train", "bf16", "timm", mode), 1.1),
        )
    )


TARGETS: dict[str, tuple[Target, ...]] = {
    "standard": model_only_targets(),
    "avx2": model_only_targets(),  # the same cases on a CPU without native bf16
    "res384": tuple(
        versus_best_peer(variant, 384, task, "bf16", 1.2) for variant in ("S/16", "B/16") for task in ("infer", "train")
    ),
    "int8": int8_targets("Ti/16", 224) + int8_targets("S/16", 224),
    "tiny": int8_targets("mu/8", 32),
}


def openvino_targets() -> tuple[Target, ...]:
    """vitlab over OpenVINO, each in its best mode: bf16 >= 1.15x at the standard batches (Ti/16, S/16,
    B/16) and >= 1.0x at batch 1 (S/16, B/16); fp32 >= 1.0x wherever the preset runs fp32."""

    def versus(variant: str, dtype: str, at_least: float, batch: int | None = None) -> Target:
        sides = (Side("infer", dtype, "vitlab"), Side("infer", dtype, OPENVINO))
        return Target(variant, 224, *sides, at_least, batch)

    return (
        *(versus(variant, "bf16", 1.15) for variant in ("Ti/16", "S/16", "B/16")),
        *(versus(variant, "bf16", 1.0, LATENCY_BATCH) for variant in ("S/16", "B/16")),
        *(versus(variant, "fp32", 1.0) for variant in ("Ti/16", "S/16")),
        versus("S/16", "fp32", 1.0, LATENCY_BATCH),
    )


# OpenVINO's own targets, in a table of their own beside the preset's (accepted per CPU kind)
OPENVINO_TARGETS: dict[str, tuple[Target, ...]] = {
    "standard": openvino_targets(),
    "tiny": tuple(
        Target("mu/8", 32, Side("infer", "fp32", "vitlab"), Side("infer", "fp32", OPENVINO), 1.0, batch)
        for batch in (None, LATENCY_BATCH)
    ),
}
