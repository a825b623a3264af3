"""`vitlab experiment shape` (Fig. 8): one step along each axis end to end, the FLOP counts of its
models against the closed form, and its findings computed from made-up numbers."""

from __future__ import annotations

import json
import re

import pytest

from vitlab.bench.flops import model_flops
from vitlab.experiments import EXPERIMENTS, Settings, run_experiment, shape
from vitlab.experiments.shape import BASE, findings, shape_config


def closed_form_flops(depth: int, dim: int, mlp: int, patch: int, image: int = 16, classes: int = 10) -> int:
    """Forward FLOPs of a class-token ViT: patch embedding, per layer 2 T (4 D^2 + 2 D MLP) for the
    dense layers and 4 T^2 D for attention over T = N + 1 tokens, and the head."""
    patches = (image // patch) ** 2
    tokens = patches + 1
    layer = 2 * tokens * (4 * dim * dim + 2 * dim * mlp) + 4 * tokens * tokens * dim
    return 2 * patches * patch * patch * 3 * dim + depth * layer + 2 * dim * classes


@pytest.mark.unit
@pytest.mark.parametrize("changes", [{}, {"depth": 8}, {"dim": 128}, {"mlp_dim": 256}, {"patch_size": 2}])
def test_shape_models_count_the_closed_form_flops(changes):
    config = shape_config(Settings(), **changes).replace(num_classes=10)
    fields = {**BASE, **changes}
    assert model_flops(config) == closed_form_flops(
        fields["depth"], fields["dim"], fields["mlp_dim"], fields["patch_size"]
    )
    assert config.num_heads == fields["dim"] // 16


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_shape_smallest_configuration_has_one_line_per_axis_through_the_base(tmp_path, monkeypatch):
    monkeypatch.setattr(shape, "AXES", {axis: (field, values[:1]) for axis, (field, values) in shape.AXES.items()})
    assert "shape" in EXPERIMENTS
    run_experiment("shape", Settings(out=tmp_path, budget_steps=1, seeds=(0,)))
    document = json.loads((tmp_path / "shape.json").read_text())
    assert [e["axis"] for e in document["summary"]] == ["base", "depth", "width", "MLP", "patch size"]
    assert [e["shape"] for e in document["summary"]] == [
        "L2-D32-MLP64/8",
        "L4-D32-MLP64/8",
        "L2-D64-MLP64/8",
        "L2-D32-MLP128/8",
        "L2-D32-MLP64/4",
    ]
    for e in document["summary"]:
        depth, dim, mlp, patch = map(int, re.fullmatch(r"L(\d+)-D(\d+)-MLP(\d+)/(\d+)", e["shape"]).groups())
        assert e["mflops"] == round(closed_form_flops(depth, dim, mlp, patch) / 1e6, 2)
    # A smaller patch adds compute but (almost) no parameters; width adds both.
    by_axis = {e["axis"]: e for e in document["summary"]}
    assert by_axis["patch size"]["params"] < by_axis["base"]["params"] < by_axis["width"]["params"]
    assert by_axis["patch size"]["mflops"] > by_axis["base"]["mflops"]
    assert document["findings"][0].startswith("The paper: Fig. 8") and len(document["findings"]) == 9
    assert (tmp_path / "shape.png").stat().st_size > 5_000


def point(axis: str, mflops: float, top1: float) -> dict:
    return {"axis": axis, "shape": axis, "mflops": mflops, "val_top1": top1, "val_top1_std": 0.0}


@pytest.mark.unit
def test_findings_rank_the_axes_by_points_per_doubling_of_flops():
    summary = [
        point("base", 1.0, 0.50),
        point("depth", 4.0, 0.70),  # 2 doublings, +10 points each
        point("width", 8.0, 0.56),  # 3 doublings, +2
        point("MLP", 2.0, 0.55),  # 1 doubling, +5
        point("patch size", 2.0, 0.52),
        point("patch size", 16.0, 0.60),  # 4 doublings, +2.5; grows at every step
    ]
    lines = findings(summary)
    assert lines[0].endswith("+10.0 points per doubling.") and "over 2.00 doublings" in lines[0]
    assert lines[4] == "Points per doubling of FLOPs, most first: depth +10.0, MLP +5.0, patch size +2.5, width +2.0."
    assert lines[5] == "depth pays most here; the paper: depth (held)."
    assert lines[6] == "width pays least here; the paper: width (held)."
    assert lines[7].endswith("robust improvements (held).")
    summary[1]["val_top1"], summary[5]["val_top1"] = 0.45, 0.51
    lines = findings(summary)
    assert lines[5] == "MLP pays most here; the paper: depth (did not hold)."
    assert lines[6] == "depth pays least here; the paper: width (did not hold)."
    assert lines[7].endswith("robust improvements (did not hold).")


@pytest.mark.unit
@pytest.mark.fault("bad-config", kinds=1)
def test_an_image_size_the_patches_do_not_tile_is_refused():
    with pytest.raises(ValueError, match="--image-size 20 is not a multiple of patch size 8"):
        shape_config(Settings(image_size=20))
