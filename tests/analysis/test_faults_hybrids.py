"""Every model family of the registry (ViT, ResNet + ViT hybrid, BiT ResNet) through the analyses,
`vitlab analyze`, the web demo's classifier and JSON endpoint, and export, at tiny sizes.

A hybrid's tokens are backbone stride x P pixels apart (its P is 1), so every map from tokens to
pixels must use the config's effective patch size; its "filters" figure shows the ResNet's root
convolution. A BiT ResNet has no attention: the analyses that need it are refused in one line when
asked for by name and skipped with a note under "all"; it is served without an overlay.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image

import vitlab
from helpers import randomise_
from vitlab.analysis import analyze, attention_maps, filters_as_images
from vitlab.cli import main
from vitlab.export import OnnxModel, export_model
from vitlab.model import ResNetConfig, create_untrained, list_models
from vitlab.model.bit import bit_resnet_config
from vitlab.serve import ImageClassifier
from vitlab.serve.app import build_app

FAMILIES = ("vit", "hybrid", "bit")
NAMES = ["ant", "bee", "cat", "dog", "eel", "fox"]
SIZE = 16
TRANSFORMER = dict(image_size=SIZE, dim=32, depth=2, num_heads=2, mlp_dim=64)
# Per family: the registered name a tiny model is made from, and what shrinks it.
TINY = {
    "vit": dict(patch_size=4, **TRANSFORMER),
    # Three stages behind the 3x3/1 stem: stride 4, a 4x4 grid at 16 px, tokens 4 px apart.
    "hybrid": dict(backbone=ResNetConfig(layers=(1, 1, 1), width=32, stem="small"), **TRANSFORMER),
    "bit": dict(image_size=SIZE, resnet=bit_resnet_config(layers=(1, 1), width=32, stem="small")),
}
FIGURES = {
    "rollout.png",
    "raw_attention.png",
    "attention_distance.png",
    "posemb_similarity.png",
    "embedding_filters.png",
}


def tiny(family: str) -> torch.nn.Module:
    name = next(n for n in list_models(family=family) if family == "vit" or "small" in n)
    model = create_untrained(name, num_classes=len(NAMES), class_names=NAMES, **TINY[family])
    model.config.preprocessing.crop_pct = 1.0
    return randomise_(model, std=0.1).eval()


def images(count: int) -> torch.Tensor:
    return torch.randn(count, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(3))


def png() -> bytes:
    picture = Image.new("RGB", (24, 20), (200, 40, 30))
    picture.paste((20, 20, 220), (4, 4, 12, 10))
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.unit
def test_the_effective_patch_size_is_the_one_source_of_the_grid():
    config = tiny("hybrid").config
    assert (config.patch_size, config.backbone.stride, config.effective_patch_size) == (1, 4, 4)
    assert config.grid_size == config.grid_for((SIZE, SIZE)) == (4, 4)
    assert config.grid_for((2, 3, 24, 32)) == (6, 8)  # an input's shape: the last two sides
    with pytest.raises(ValueError, match="18x16 pixels is not divisible by the effective patch size 4"):
        config.grid_for((18, 16))


# -- vitlab.analysis -----------------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.fault("hybrids", kinds=1)
@pytest.mark.parametrize("family", FAMILIES)
def test_analyze_runs_what_applies_to_every_family(tmp_path, family):
    model = tiny(family)
    result = analyze(model, images(4), tmp_path, show=2)
    numbers = json.loads(result.json_path.read_text())
    drawn = {figure.path.name for figure in result.figures}
    filters = filters_as_images(
        np.array(numbers["embedding_filters"]["components"]).reshape(
            len(numbers["embedding_filters"]["explained_variance_ratio"]), 3, *model_filter_size(model)
        )
    )
    # No black squares: each component is stretched over its own range.
    assert np.all(filters.max(axis=(1, 2, 3)) - filters.min(axis=(1, 2, 3)) > 0.99)
    if family == "bit":
        assert drawn == {"embedding_filters.png"} and numbers["embedding_filters"]["layer"] == "root convolution"
        assert any("rollout, distance, posemb skipped: a ResNet has no attention" in n for n in result.notes)
        return
    assert drawn == FIGURES
    grid = list(model.config.grid_size)
    assert numbers["rollout"]["grid"] == grid and np.array(numbers["rollout"]["maps"]).shape == (2, *grid)
    assert numbers["position_similarity"]["grid"] == grid
    # Distances in pixels: tokens lie effective-patch-size pixels apart whatever P is.
    patch = model.config.effective_patch_size
    farthest = patch * np.hypot(grid[0] - 1, grid[1] - 1)
    assert numbers["mean_attention_distance"]["uniform_attention_pixels"] > patch * 0.5
    assert np.all(np.array(numbers["mean_attention_distance"]["pixels"]) <= farthest + 1e-6)
    assert numbers["model"]["effective_patch_size"] == patch
    expected_layer = "root convolution" if family == "hybrid" else "patch embedding"
    assert numbers["embedding_filters"]["layer"] == expected_layer


def model_filter_size(model: torch.nn.Module) -> tuple[int, int]:
    """The spatial size of the filters that meet the pixels (k x k of the root conv, P x P of E)."""
    embed = getattr(model, "patch_embed", None)
    conv = embed.backbone.stem.conv if hasattr(embed, "backbone") else embed.proj if embed else model.stem.conv
    return tuple(conv.weight.shape[-2:])


@pytest.mark.unit
@pytest.mark.fault("hybrids", kinds=3)
def test_attention_analyses_of_a_resnet_are_refused_in_one_line(tmp_path):
    model = tiny("bit")
    for what in ("rollout", "distance,filters"):
        with pytest.raises(
            ValueError,
            match=r"^BiT-R26x1-small: attention analyses need a transformer; a ResNet "
            r"has no attention to show$",
        ):
            analyze(model, images(2), tmp_path, what=what)
    with pytest.raises(ValueError, match="attention analyses need a transformer"):
        attention_maps(model, images(1))


@pytest.mark.integration
@pytest.mark.fault("hybrids", kinds=1)
def test_hybrid_rollout_covers_the_image_on_the_token_grid():
    model = tiny("hybrid")
    batch = torch.randn(2, 3, 24, 32)
    maps = attention_maps(model, batch)  # another input size: its own grid
    assert maps.rollout.shape == maps.raw.shape == (2, 6, 8)
    with torch.no_grad():
        torch.testing.assert_close(maps.logits, model(batch))  # the maps come with the prediction
    assert maps.rollout.std() > 0  # not a constant map


# -- vitlab analyze ------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.fault("hybrids", kinds=1)
@pytest.mark.parametrize("family", FAMILIES)
def test_analyze_command_on_every_family(tmp_path, capsys, family):
    ckpt = vitlab.save_pretrained(tiny(family), tmp_path / "model")
    out = tmp_path / "analysis"
    assert (
        main(["analyze", "--ckpt", str(ckpt), "--out", str(out), "--max-images", "4", "--show", "2", "--device", "cpu"])
        == 0
    )
    drawn = {path.name for path in out.glob("*.png")}
    assert drawn == ({"embedding_filters.png"} if family == "bit" else FIGURES)
    assert "report: " in capsys.readouterr().out
    if family == "bit":  # asked for by name: one line, exit status 2
        assert main(["analyze", "--ckpt", str(ckpt), "--out", str(out), "--what", "rollout", "--device", "cpu"]) == 2
        error = capsys.readouterr().err
        assert "a ResNet has no attention" in error and error.count("\n") == 1 and "Traceback" not in error


# -- the web demo --------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.fault("hybrids", kinds=1)
@pytest.mark.parametrize("family", FAMILIES)
def test_classifier_and_endpoint_serve_every_family(family):
    model = tiny(family)
    classifier = ImageClassifier(model)
    result = classifier.classify(png(), name="shapes.png")
    with torch.no_grad():
        probs = model(classifier.transform(Image.open(io.BytesIO(png())).convert("RGB"))[None]).softmax(-1)[0]
    assert [label for label, _ in result.top] == [NAMES[i] for i in probs.topk(5).indices]
    if family == "bit":
        assert result.overlay is None and not classifier.has_overlay
    else:
        tint = np.abs(np.asarray(result.overlay, np.float32) - np.asarray(result.model_input, np.float32)).sum(-1)
        assert tint.mean() > 5 and tint.std() > 1  # the heat map varies over the image
    with TestClient(build_app(classifier, f"tiny {family}")) as client:  # in-process ASGI, no socket
        response = client.post("/predict", content=png())
        assert response.status_code == 200
        assert [entry["label"] for entry in response.json()["top"]] == [label for label, _ in result.top]
        page = client.get("/")
        assert page.status_code == 200


# -- export --------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.fault("hybrids", kinds=1)
@pytest.mark.parametrize("family", FAMILIES)
def test_onnx_export_of_every_family_reads_back(tmp_path, capsys, family):
    model = tiny(family)
    ckpt = vitlab.save_pretrained(model, tmp_path / "model")
    assert main(["export", "--ckpt", str(ckpt), "--format", "onnx", "--out", str(tmp_path / "m.onnx")]) == 0
    assert "max |logit difference|" in capsys.readouterr().out
    runtime = OnnxModel(tmp_path / "m.onnx")
    assert type(runtime.config) is type(model.config) and runtime.config == model.config
    batch = images(3)
    with torch.no_grad():
        expected = model(batch)
    assert (runtime(batch) - expected).abs().max().item() <= 1e-4 and expected.abs().max().item() > 1e-2


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.fault("hybrids", kinds=2)
def test_npz_export_writes_a_hybrid_and_refuses_a_resnet_in_one_line(tmp_path, capsys):
    path, check = export_model(tiny("hybrid"), "npz", tmp_path / "hybrid.npz")
    assert path.is_file() and check.max_abs_diff <= 1e-4
    ckpt = vitlab.save_pretrained(tiny("bit"), tmp_path / "bit")
    assert main(["export", "--ckpt", str(ckpt), "--format", "npz", "--out", str(tmp_path / "bit.npz")]) == 2
    error = capsys.readouterr().err
    assert "holds ViTs and hybrids, not a BiT ResNet" in error and error.count("\n") == 1
