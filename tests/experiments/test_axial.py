"""`vitlab experiment axial` (Fig. 13): its smallest configuration end to end, the FLOP counts of
its models against the closed form, and its findings computed from made-up numbers."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from vitlab.accel import cpu
from vitlab.bench.flops import model_flops
from vitlab.cli import main
from vitlab.experiments import Settings
from vitlab.experiments.axial import findings, model_config


def closed_form_flops(axial: bool, grid: tuple[int, int], dim: int, depth: int, patch: int, classes: int) -> int:
    """Forward FLOPs of a GAP ViT / Axial-ViT, every matmul counted as 2 M N K: patch embedding, per
    layer qkv (3 D^2), out projection (D^2) and MLP (2 x 4 D^2) per token, attention q k^T and a v
    (2 x 2 S^2 D per line of S tokens), and the head."""
    height, width = grid
    tokens, mlp = height * width, 4 * dim
    linear = 2 * tokens * (4 * dim * dim + 2 * dim * mlp)
    if axial:  # a row and a column sub-block, each a full ViT block over lines of w and of h tokens
        layer = 2 * linear + 4 * tokens * width * dim + 4 * tokens * height * dim
    else:
        layer = linear + 4 * tokens * tokens * dim
    return 2 * tokens * patch * patch * 3 * dim + depth * layer + 2 * dim * classes


@pytest.mark.unit
@pytest.mark.parametrize("family", ["ViT", "Axial-ViT"])
@pytest.mark.parametrize("size", ["32x2", "64x4"])
def test_sweep_models_count_the_closed_form_flops(family, size):
    width, depth = map(int, size.split("x"))
    config = model_config(Settings(image_size=32), family, size).replace(image_size=(32, 16), num_classes=10)
    expected = closed_form_flops(family == "Axial-ViT", (8, 4), width, depth, 4, 10)
    assert model_flops(config) == expected
    assert config.pool == "gap" and config.num_heads == width // 16 and config.mlp_dim == 4 * width


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_axial_smallest_configuration_writes_flops_times_and_two_panels(tmp_path):
    argv = ["experiment", "axial", "--data", "digits", "--out", str(tmp_path), "--budget-steps", "2"]
    assert main([*argv, "--seeds", "0", "--sizes", "16x1"]) == 0
    document = json.loads((tmp_path / "axial.json").read_text())
    vit, axial = document["summary"]
    assert (vit["family"], axial["family"]) == ("ViT", "Axial-ViT") and vit["size"] == axial["size"] == "16x1"
    # 16 px at patch 4: a 4x4 grid, so per layer the axial attention is 4 T (4 + 4) D against ViT's 4 T^2 D.
    for entry in (vit, axial):
        counted = closed_form_flops(entry["family"] == "Axial-ViT", (4, 4), 16, 1, 4, 10)
        assert entry["mflops"] == round(counted / 1e6, 2) == document["models"][f"{entry['family']} 16x1"]["mflops"]
        assert 0 < entry["ms_per_image"] < 1000 and 0 <= entry["val_top1"] <= 1
    timing = document["timing"]
    assert timing["batch"] == 64 and timing["dtype"] == "fp32" and timing["rounds"] >= 3
    assert timing["machine"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert timing["machine"]["torch_threads"] == 1  # the experiment's --threads
    table = (tmp_path / "axial.md").read_text()
    assert f"| {axial['ms_per_image']:g} |" in table and "inference ms / image" in table
    assert "The paper: Fig. 13" in table and "CPU capability" in document["findings"][-1]
    assert f"({cpu.cpu_model()})" in document["findings"][-1]  # which CPU of its name
    with Image.open(tmp_path / "axial.png") as image:  # two panels side by side: FLOPs and time
        assert image.size[0] > 2.5 * image.size[1]
    assert (tmp_path / "runs" / "Axial-16x1-seed0" / "summary.json").exists()


def entry(family: str, size: str, mflops: float, ms: float, top1: float) -> dict:
    return {"family": family, "size": size, "mflops": mflops, "ms_per_image": ms, "val_top1": top1}


@pytest.mark.unit
def test_findings_compare_each_pair_and_the_vit_line_at_equal_flops_and_time():
    summary = [
        entry("ViT", "a", 1.0, 0.1, 0.80),
        entry("Axial-ViT", "a", 2.0, 0.4, 0.90),
        entry("ViT", "b", 4.0, 0.2, 0.90),
        entry("Axial-ViT", "b", 8.0, 0.8, 0.95),
    ]
    lines = findings(summary)
    assert lines[0].startswith("a: Axial-ViT 90.0% is above ViT 80.0% (+10.0 points) at 2.00x the forward FLOPs")
    assert "4.00x the inference time" in lines[0]
    assert "at 2 of 2 sizes and costs more FLOPs and time at 2" in lines[2] and lines[2].endswith("held at every size.")
    # ViT's line at 2 MFLOPs, half way in log FLOPs from 1 to 4: 85%; Axial-ViT b lies beyond the ViTs.
    assert lines[3].endswith("in points: +5.0 at a.")
    assert lines[4].endswith("none of the Axial-ViTs lies within the ViT sizes' range.")
    summary[1]["val_top1"] = 0.75
    assert findings(summary)[2].endswith("did not hold at every size.")


@pytest.mark.unit
@pytest.mark.fault("bad-config", kinds=2)
def test_bad_sizes_are_refused_in_one_line():
    with pytest.raises(ValueError, match="--sizes 64: must be WIDTHxDEPTH"):
        Settings(sizes=("64",))
    with pytest.raises(ValueError, match="width 40 is not a multiple of the head width 16"):
        model_config(Settings(), "ViT", "40x2")
