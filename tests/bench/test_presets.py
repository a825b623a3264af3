"""The presets' case lists and the targets they are held to."""

from __future__ import annotations

import pytest

from vitlab.bench import PRESETS, Case, Mode
from vitlab.bench.implementations import RUNTIMES
from vitlab.bench.presets import INT8_ACCURACY_PRESETS, SAME_NUMERICS
from vitlab.bench.report import targets_table
from vitlab.bench.targets import BEST_PEER, EAGER, LATENCY_BATCH, OPENVINO_TARGETS, TARGETS, Side, Target
from vitlab.model import config_for

pytestmark = pytest.mark.unit


def cases_of(preset: str) -> dict[tuple, tuple]:
    """The preset's throughput cases (the batch-1 latency ones aside)."""
    return {
        (s.case.variant, s.case.image_size, s.case.task, s.case.dtype): (s.implementations, s.modes)
        for s in PRESETS[preset]()
        if s.case.batch != LATENCY_BATCH
    }


def test_standard_measures_batch_1_latency_of_every_implementation_computing_the_cases_numbers():
    latency = {(s.case.variant, s.case.dtype): s for s in PRESETS["standard"]() if s.case.batch == LATENCY_BATCH}
    assert set(latency) == {("S/16", "fp32"), ("S/16", "bf16"), ("B/16", "bf16")}
    for spec in latency.values():
        assert spec.case.task == "infer" and set(spec.implementations) == set(SAME_NUMERICS)
        assert "fast" in spec.modes
    assert any(s.case.batch == LATENCY_BATCH for s in PRESETS["tiny"]())


def test_res384_runs_s16_and_b16_at_the_fine_tuning_resolution():
    cases = cases_of("res384")
    assert set(cases) == {(v, 384, t, "bf16") for v in ("S/16", "B/16") for t in ("infer", "train")}
    assert config_for("S/16", image_size=384).num_patches + 1 == 577  # the sequence length the rule is for
    for (_, _, task, _), (implementations, modes) in cases.items():
        if task == "infer":  # every peer, each in the modes that can win
            assert implementations == () and {"fast", "compile+bf16w", "eager+bf16w"} == set(modes)
        else:
            assert implementations == ("vitlab", "timm") and set(modes) == {"eager", "compile"}


def test_int8_preset_pits_int8_against_both_fast_paths():
    cases = cases_of("int8")
    for variant in ("Ti/16", "S/16"):
        implementations, modes = cases[(variant, 224, "infer", "fp32")]
        assert {"vitlab", "vitlab-int8", "onnxruntime", "onnxruntime-int8"} == set(implementations) and "fast" in modes
        assert cases[(variant, 224, "infer", "bf16")] == (("vitlab",), ("fast",))
    tiny = cases_of("tiny")
    assert {"vitlab-int8", "onnxruntime-int8"} <= set(tiny[("mu/8", 32, "infer", "fp32")][0])
    assert set(INT8_ACCURACY_PRESETS) == {"int8", "tiny"}


def test_avx2_preset_shows_int8_in_its_fp32_cases_without_onnxruntime():
    cases = cases_of("avx2")
    for variant in ("Ti/16", "S/16"):
        fp32, bf16 = cases[(variant, 224, "infer", "fp32")][0], cases[(variant, 224, "infer", "bf16")][0]
        assert "vitlab-int8" in fp32 and "vitlab-int8" not in bf16
        assert not {"onnxruntime", "onnxruntime-int8"} & set(fp32 + bf16)


@pytest.mark.parametrize(
    "targets, preset",
    [(TARGETS, name) for name in sorted(TARGETS)] + [(OPENVINO_TARGETS, name) for name in OPENVINO_TARGETS],
)
def test_every_target_reads_rows_its_preset_runs(targets, preset):
    specs = PRESETS[preset]()
    assert targets[preset]
    for target in targets[preset]:
        for side in (target.numerator, target.denominator):
            case = Case(target.variant, target.image_size, 1, side.dtype, side.task)
            spec = next(
                s
                for s in specs
                if (s.case.variant, s.case.image_size, s.case.task, s.case.dtype)
                == (case.variant, case.image_size, case.task, case.dtype)
                and (s.case.batch == target.batch if target.batch else s.case.batch != LATENCY_BATCH)
            )
            if side.implementation != BEST_PEER:
                assert not spec.implementations or side.implementation in spec.implementations, target.label
                implementation_modes = ("eager",) if side.implementation in RUNTIMES else spec.modes
                assert any(Mode.parse(m).applies_to(spec.case, side.implementation) for m in implementation_modes)
            modes = [mode for mode in spec.modes if mode.startswith("eager")] if side.mode == EAGER else [side.mode]
            if side.mode:
                assert modes and all(mode in spec.modes for mode in modes), target.label
                implementation = "timm" if side.implementation == BEST_PEER else side.implementation
                assert any(Mode.parse(mode).applies_to(spec.case, implementation) for mode in modes), target.label


def test_a_target_is_the_ratio_of_its_two_rows():
    rows = [{"implementation": "vitlab", "images_per_s": 30.0, "modes": {"eager": 20.0, "fast": 30.0}}]
    peer = {"implementation": "timm", "images_per_s": 25.0, "modes": {"compile": 25.0}}
    cases = [
        {
            "variant": "S/16",
            "image_size": 384,
            "task": "infer",
            "dtype": "bf16",
            "best_peer": "timm",
            "rows": [*rows, peer],
        }
    ]
    target = Target("S/16", 384, Side("infer", "bf16", "vitlab", "eager"), Side("infer", "bf16", BEST_PEER), 1.2)
    assert target.ratio(cases) == pytest.approx(0.8)
    assert Target("S/16", 384, Side("infer", "bf16", "vitlab"), Side("infer", "bf16", "timm"), 1.2).ratio(cases) == 1.2
    assert Target("B/16", 384, Side("infer", "bf16", "vitlab"), Side("infer", "bf16", "timm"), 1).ratio(cases) is None
    assert target.label == "S/16 @384: vitlab eager (bf16 infer) / best peer (bf16 infer) >= 1.2x"


def test_an_eager_target_reads_each_sides_fastest_eager_mode_among_pytorch_peers():
    def row(name: str, **modes: float) -> dict:
        return {"implementation": name, "images_per_s": max(modes.values()), "modes": modes}

    rows = [
        row("vitlab", **{"eager": 50.0, "eager+bf16w": 66.0, "fast": 80.0}),
        row("timm", **{"eager": 40.0, "eager+bf16w": 48.0, "compile+bf16w": 70.0}),
        row("torchvision", **{"eager": 44.0, "eager+bf16w": 55.0}),
        row("onnxruntime", eager=90.0),  # one optimized session: no eager mode to compare
        row("vitlab-int8", fast=200.0),
    ]
    cases = [
        {"variant": "S/16", "image_size": 224, "task": "infer", "dtype": "bf16", "best_peer": "timm", "rows": rows}
    ]
    eager = Target("S/16", 224, Side("infer", "bf16", "vitlab", EAGER), Side("infer", "bf16", BEST_PEER, EAGER), 1.2)
    assert eager.ratio(cases) == pytest.approx(66.0 / 55.0)
    assert eager.label == "S/16 @224: vitlab eager (bf16 infer) / best PyTorch peer eager (bf16 infer) >= 1.2x"
    best = Target("S/16", 224, Side("infer", "bf16", "vitlab"), Side("infer", "bf16", BEST_PEER), 1.2)
    assert best.ratio(cases) == pytest.approx(80.0 / 70.0)


def test_a_target_within_one_case_gives_its_ratio_in_each_round_and_the_report_says_when_one_falls_short():
    def contender(name: str, mode: str, *seconds: float) -> dict:
        return {"implementation": name, "mode": mode, "seconds": list(seconds)}

    def row(name: str, **modes: float) -> dict:
        return {"implementation": name, "images_per_s": max(modes.values()), "modes": modes}

    case = {
        "variant": "S/16",
        "image_size": 224,
        "task": "infer",
        "dtype": "bf16",
        "best_peer": "timm",
        "rows": [row("vitlab", eager=10.0, fast=20.0), row("timm", eager=8.0, compile=12.0)],
        "contenders": [
            contender("vitlab", "eager", 1.0, 1.0, 1.0),
            contender("vitlab", "fast", 0.5, 0.5, 0.4),
            contender("timm", "eager", 1.3, 1.1, 1.25),
            contender("timm", "compile", 0.9, 0.8, 0.8),
        ],
    }
    fp32 = {**case, "dtype": "fp32", "contenders": []}
    eager = Target("S/16", 224, Side("infer", "bf16", "vitlab", EAGER), Side("infer", "bf16", BEST_PEER, EAGER), 1.2)
    assert eager.ratio([case]) == pytest.approx(10.0 / 8.0)
    assert eager.round_ratios([case]) == pytest.approx([1.3, 1.1, 1.25])  # timm eager over vitlab eager
    best = Target("S/16", 224, Side("infer", "bf16", "vitlab"), Side("infer", "bf16", BEST_PEER), 1.2)
    assert best.round_ratios([case]) == pytest.approx([1.8, 1.6, 2.0])  # timm compile over vitlab fast
    across = Target("S/16", 224, Side("infer", "fp32", "vitlab"), Side("infer", "bf16", "vitlab", "fast"), 1.0)
    assert across.round_ratios([fp32, case]) is None  # timed in different rounds: no pairs

    results = {"preset": "standard", "cases": [case]}
    text = "\n".join(targets_table(results))
    assert f"| {eager.label} | 1.25x | 1.10x - 1.30x | met |" in text
    assert f"a rerun may miss: 1 ({eager.label})" in text
