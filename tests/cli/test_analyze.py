"""End to end: a saved model folder -> `vitlab analyze` (PNGs, JSON, HTML) and `vitlab fewshot`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from helpers import randomise_
from vitlab.cli import main
from vitlab.model import create_untrained

FIGURES = (
    "rollout.png",
    "raw_attention.png",
    "attention_distance.png",
    "posemb_similarity.png",
    "embedding_filters.png",
)


def saved_model(folder, **overrides):
    options = dict(
        image_size=16, depth=2, dim=32, num_heads=2, mlp_dim=64, num_classes=10, class_names=[str(d) for d in range(10)]
    )
    options.update(overrides)
    model = randomise_(create_untrained("Ti/4", **options), std=0.1)
    model.config.preprocessing.crop_pct = 1.0
    model.save_pretrained(folder)
    return folder


@pytest.mark.integration
def test_analyze_writes_every_figure_the_numbers_and_the_report(tmp_path, capsys):
    ckpt = saved_model(tmp_path / "model")
    out = tmp_path / "analysis"
    assert (
        main(
            [
                "analyze",
                "--ckpt",
                str(ckpt),
                "--out",
                str(out),
                "--max-images",
                "12",
                "--show",
                "3",
                "--layer",
                "0",
                "--head",
                "1",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    for name in FIGURES:
        with Image.open(out / name) as image:  # a real PNG, drawn at a readable size
            assert image.format == "PNG" and min(image.size) > 200
    numbers = json.loads((out / "analysis.json").read_text())
    distance = np.array(numbers["mean_attention_distance"]["pixels"])
    assert distance.shape == (2, 2) and numbers["mean_attention_distance"]["images"] == 12
    assert np.all(distance >= 0) and np.all(distance <= 12 * np.sqrt(2))  # farthest patch centres
    assert np.array(numbers["rollout"]["maps"]).shape == (3, 4, 4)
    assert (numbers["raw_attention"]["layer_index"], numbers["raw_attention"]["head_index"]) == (0, 1)
    similarity = np.array(numbers["position_similarity"]["matrix"])
    np.testing.assert_allclose(similarity.diagonal(), 1.0, atol=1e-4)
    assert len(numbers["embedding_filters"]["explained_variance_ratio"]) == 28
    assert len(numbers["predictions"]) == 3 and numbers["predictions"][0].startswith("pred ")
    page = (out / "report.html").read_text()
    assert page.count('<img src="data:image/png;base64,') == len(FIGURES)
    assert "mean_attention_distance" in page
    printed = capsys.readouterr().out
    assert f"report: {out / 'report.html'}" in printed


@pytest.mark.integration
def test_analyze_own_images_and_a_subset(tmp_path, caplog):
    ckpt = saved_model(tmp_path / "model", pool="gap", pos_embed="none")
    pictures = tmp_path / "pictures"
    pictures.mkdir()
    rng = np.random.default_rng(0)
    for index in range(3):
        Image.fromarray(rng.integers(0, 255, (40, 30, 3), dtype=np.uint8)).save(pictures / f"{index}.png")
    (pictures / "broken.jpg").write_bytes(b"not an image")
    out = tmp_path / "analysis"
    assert (
        main(
            [
                "analyze",
                "--ckpt",
                str(ckpt),
                "--images",
                str(pictures),
                "--out",
                str(out),
                "--what",
                "rollout,distance",
                "--image-size",
                "24",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert sorted(p.name for p in out.glob("*.png")) == ["attention_distance.png", "raw_attention.png", "rollout.png"]
    numbers = json.loads((out / "analysis.json").read_text())
    assert numbers["mean_attention_distance"]["images"] == 3
    assert numbers["rollout"]["grid"] == [6, 6]  # 24 px at P 4
    assert "broken.jpg" in caplog.text
    # "all" on a model without position embeddings: the other figures, and a note saying why.
    assert (
        main(
            [
                "analyze",
                "--ckpt",
                str(ckpt),
                "--images",
                str(pictures / "0.png"),
                "--out",
                str(out / "all"),
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert not (out / "all" / "posemb_similarity.png").exists()
    assert "pos_embed=&#x27;none&#x27;" in (out / "all" / "report.html").read_text()


@pytest.mark.unit
@pytest.mark.parametrize(
    "argv,message",
    [
        (["--what", "posemb"], "pos_embed='none'"),
        (["--what", "rollout,saliency"], "unknown analysis saliency"),
        (["--layer", "5"], "layer 5 is out of range"),
        (["--images", "missing.png"], "missing.png: no such file or folder"),
    ],
)
def test_analyze_user_errors_are_one_line(tmp_path, capsys, argv, message):
    ckpt = saved_model(tmp_path / "model", pos_embed="none")
    code = main(
        ["analyze", "--ckpt", str(ckpt), "--out", str(tmp_path / "out"), "--max-images", "2", "--device", "cpu", *argv]
    )
    error = capsys.readouterr().err
    assert code == 2 and message in error and "Traceback" not in error


@pytest.mark.integration
def test_fewshot_command_on_digits(tmp_path, capsys):
    ckpt = saved_model(tmp_path / "model", representation_size=24)
    out = tmp_path / "fewshot.json"
    assert (
        main(
            [
                "fewshot",
                "--ckpt",
                str(ckpt),
                "--data",
                "digits",
                "--shots",
                "1,5",
                "--seeds",
                "2",
                "--out",
                str(out),
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert result["feature_dim"] == 24 and (result["train_images"], result["test_images"]) == (1437, 360)
    shots = result["fewshot"]["shots"]
    assert set(shots) == {"1", "5"} and all(len(s["per_seed"]) == 2 for s in shots.values())
    # Even random features carry some signal about digits: well above the 10% of chance.
    assert shots["5"]["mean"] > 0.2 and result["linear_probe"]["accuracy"] > 0.3
    printed = capsys.readouterr().out
    assert "5-shot" in printed and "linear probe" in printed
    with pytest.raises(SystemExit):  # argparse's usage error, exit status 2
        main(["fewshot", "--ckpt", str(ckpt), "--data", "digits", "--shots", "1,x"])
    assert "expected comma-separated integers" in capsys.readouterr().err
