"""Hub folders: the model card save_pretrained writes, and vitlab.load("hf://org/name[@rev]") served
from a Hub cache laid out as huggingface_hub keeps it (no network)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard, constants
from safetensors.torch import save_file

import vitlab
from helpers import REPO_ROOT, randomise_
from vitlab.model import Preprocessing, ViTConfig
from vitlab.weights import CheckpointError

TINY = dict(image_size=32, patch_size=8, dim=32, depth=2, num_heads=4, mlp_dim=64, num_classes=3)
REVISION = "0123456789abcdef0123456789abcdef01234567"
SUMMARY = {  # what the trainer passes as save_pretrained(model, out, training=summary)
    "val_top1": 0.9375,
    "val_top5": 1.0,
    "val_loss": 0.21,
    "steps": 400,
    "epochs": 5.0,
    "wall_time_s": 61.2,
    "recipe": "digits-ti",
    "data": "digits",
    "device": "cpu",
    "precision": "fp32",
    "ema": False,
}


def tiny_model(**options) -> vitlab.VisionTransformer:
    config = ViTConfig(**{**TINY, **options}, class_names=["circle", "square", "triangle"], name="Ti/8-shapes")
    return randomise_(vitlab.create_model(config)).eval()


def images() -> torch.Tensor:
    return torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))


# -- the model card ------------------------------------------------------------------------------------
@pytest.mark.unit
def test_save_pretrained_writes_a_model_card_with_training_summary(tmp_path):
    model = tiny_model(pool="gap")
    vitlab.save_pretrained(model, tmp_path / "run", training=SUMMARY, license="apache-2.0")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["README.md", "config.json", "model.safetensors"]

    card = ModelCard.load(tmp_path / "run" / "README.md")  # the Hub's own parser
    assert card.data.library_name == "vitlab" and card.data.license == "apache-2.0"
    assert card.data.pipeline_tag == "image-classification"
    result = card.data.eval_results[0]
    assert (result.dataset_name, result.metric_type, result.metric_value) == ("digits", "accuracy", 0.9375)

    text = card.text
    assert "# Ti/8-shapes" in text
    assert "| width D / depth / heads / MLP | 32 / 2 / 4 / 64 |" in text
    assert "| tokens | 4 x 4 patches |" in text  # GAP: no class token
    assert "| pooling | global average pooling |" in text
    assert f"| parameters | {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M |" in text
    assert "3 classes: `circle`, `square`, `triangle`." in text
    assert "| recipe | digits-ti |" in text and "| steps | 400 |" in text
    assert "## Results" in text and "| val_top1 | 0.9375 |" in text and "| val_loss | 0.21 |" in text
    assert 'vitlab.load("run")' in text and str(tmp_path) not in text  # no machine paths in a shareable card
    assert vitlab.load(tmp_path / "run").config == model.config  # the card changes nothing that loads


@pytest.mark.unit
def test_model_card_without_training_has_no_results_section(tmp_path):
    config = ViTConfig(**TINY, preprocessing=Preprocessing(crop_pct=1.0, interpolation="bilinear"))
    vitlab.save_pretrained(vitlab.create_model(config), tmp_path / "plain")
    card = ModelCard.load(tmp_path / "plain" / "README.md")
    assert card.data.eval_results is None and card.data.license is None
    assert "## Training" not in card.text and "## Results" not in card.text
    assert "3 classes, unnamed." in card.text
    assert (
        "| resize to cover | 32 x 32 px (bilinear, aspect ratio kept) |" in card.text
        and "| tokens | 4 x 4 patches + 1 class token |" in card.text
    )


# -- hf:// -----------------------------------------------------------------------------------------------
def hub_cache(root: Path, repo_id: str, files: dict[str, Path]) -> Path:
    """A Hub cache holding one repository at REVISION with refs/main pointing to it, as
    huggingface_hub lays it out (models--ORG--NAME/{refs/main, snapshots/REV/...})."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    for name, source in files.items():
        (snapshot / name).write_bytes(source.read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    return snapshot


@pytest.fixture
def offline_hub(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "hub"
    root.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))  # huggingface_hub reads the env var at import
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


@pytest.mark.unit
def test_hf_reference_loads_a_saved_folder_from_the_hub_cache(tmp_path, offline_hub):
    model = tiny_model()
    folder = vitlab.save_pretrained(model, tmp_path / "upload", training=SUMMARY)
    hub_cache(offline_hub, "vitlab-test/shapes", {p.name: p for p in folder.iterdir()})

    for reference in ("hf://vitlab-test/shapes", f"hf://vitlab-test/shapes@{REVISION}", "hf://vitlab-test/shapes@main"):
        loaded = vitlab.load(reference)
        assert loaded.config == model.config
        with torch.no_grad():
            assert torch.equal(loaded(images()), model(images()))
    assert vitlab.load("hf://vitlab-test/shapes", num_classes=5).config.num_classes == 5


@pytest.mark.unit
def test_hf_reference_reads_a_timm_repository_with_its_preprocessing(tmp_path, offline_hub):
    timm = pytest.importorskip("timm")
    reference = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2, num_classes=4
    ).eval()
    randomise_(reference)
    save_file(reference.state_dict(), str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "architecture": "vit_tiny_patch16_224",
                "num_classes": 4,
                "pretrained_cfg": {
                    "mean": [0.485, 0.456, 0.406],
                    "std": [0.229, 0.224, 0.225],
                    "crop_pct": 0.875,
                    "interpolation": "bicubic",
                    "input_size": [3, 32, 32],
                },
            }
        )
    )
    hub_cache(
        offline_hub,
        "timm/vit_tiny_test",
        {"config.json": tmp_path / "config.json", "model.safetensors": tmp_path / "model.safetensors"},
    )
    loaded = vitlab.load("hf://timm/vit_tiny_test")
    assert loaded.config.preprocessing == Preprocessing(
        (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 0.875, "bicubic", crop_mode="center"
    )
    with torch.no_grad():
        assert torch.allclose(loaded(images()), reference(images()), atol=1e-5)


@pytest.mark.unit
def test_hf_reference_reads_a_timm_repositorys_model_args_and_label_names(tmp_path, offline_hub):
    """A timm repository as vitlab's timm export writes it: act_layer and label_names are the
    repository's (the hf:// path read neither before)."""
    model = tiny_model(act="gelu_tanh")
    folder = model.save_pretrained(tmp_path / "timm", format="timm")
    hub_cache(offline_hub, "vitlab-test/tanh", {p.name: p for p in folder.iterdir()})
    loaded = vitlab.load("hf://vitlab-test/tanh")
    assert loaded.config.act == "gelu_tanh" and loaded.config.class_names == ["circle", "square", "triangle"]
    with torch.no_grad():
        assert (loaded(images()) - model(images())).abs().max().item() <= 1e-6


@pytest.mark.unit
@pytest.mark.parametrize(
    "reference, message",
    [
        ("hf://vitlab-test/absent", "hf://vitlab-test/absent: offline and not in the Hub cache"),
        ("hf://no-slash", "a Hub reference is hf://ORG/NAME or hf://ORG/NAME@REVISION"),
        ("hf://vitlab-test/shapes@v9", "hf://vitlab-test/shapes@v9: offline and not in the Hub cache"),
    ],
)
def test_bad_hf_references_say_why(offline_hub, reference, message):
    with pytest.raises(CheckpointError, match=message):
        vitlab.load(reference)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_hub_environment_variables_reach_the_command_line(tmp_path):
    """A fresh process with only HF_HUB_OFFLINE / HF_HUB_CACHE set exports a model from the Hub cache."""
    folder = vitlab.save_pretrained(
        tiny_model(act="gelu_tanh", gap_norm="before_pool", pool="gap"), tmp_path / "upload"
    )
    hub_cache(tmp_path / "hub", "vitlab-test/shapes", {p.name: p for p in folder.iterdir()})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vitlab",
            "export",
            "--ckpt",
            "hf://vitlab-test/shapes",
            "--format",
            "npz",
            "--out",
            str(tmp_path / "shapes.npz"),
        ],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout and (tmp_path / "shapes.npz").is_file()


# -- catalogue names read from the HF cache first ----------------------------------------------------------
CATALOGUE_NAME = "Ti/16:augreg-in21k-ft-in1k"  # the smallest catalogue model
CATALOGUE_REPO = "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k"


@pytest.fixture
def no_network(monkeypatch) -> None:
    """Any connection, and any download from the catalogue's own sources, raises."""

    def refuse(*args, **kwargs):
        raise AssertionError("the network was used")

    monkeypatch.setattr("socket.socket.connect", refuse)
    monkeypatch.setattr("vitlab.weights.pretrained.fetch", refuse)


def timm_weights_file(tmp_path: Path, model: torch.nn.Module) -> Path:
    """`model` in timm's format: the model.safetensors of a timm Hub repository."""
    return model.save_pretrained(tmp_path / "timm-format", format="timm") / "model.safetensors"


@pytest.mark.unit
def test_catalogue_name_loads_from_the_hf_cache_offline_without_network(tmp_path, offline_hub, no_network, caplog):
    assert vitlab.weights.catalogue.find(CATALOGUE_NAME).hub_repos == (CATALOGUE_REPO,)
    model = randomise_(vitlab.create_model("Ti/16", num_classes=1000, act="gelu_tanh"), std=0.05).eval()
    snapshot = hub_cache(offline_hub, CATALOGUE_REPO, {"model.safetensors": timm_weights_file(tmp_path, model)})
    batch = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))

    with caplog.at_level("INFO", logger="vitlab"):
        loaded = vitlab.load(CATALOGUE_NAME)
    assert f"reading {CATALOGUE_REPO} from the Hugging Face cache ({snapshot / 'model.safetensors'})" in caplog.text
    assert loaded.config.name == CATALOGUE_NAME and len(loaded.config.class_names) == 1000
    with torch.no_grad():
        assert torch.equal(loaded(batch), model(batch))
    # overrides as for the catalogue's own files: a new head, a resampled E_pos
    tuned = vitlab.create_model("Ti/16", pretrained="augreg-in21k-ft-in1k", num_classes=10, image_size=384)
    assert tuned.config.num_classes == 10 and tuned.config.image_size == (384, 384)


@pytest.mark.unit
def test_a_file_in_the_hf_cache_that_is_not_the_named_model_is_refused(tmp_path, offline_hub, no_network):
    other = vitlab.create_model("Ti/16", num_classes=1000, image_size=384)  # another release's resolution
    hub_cache(offline_hub, CATALOGUE_REPO, {"model.safetensors": timm_weights_file(tmp_path, other)})
    with pytest.raises(
        CheckpointError, match=r"model.safetensors is not this model: image size \(384, 384\) \(expected"
    ):
        vitlab.load(CATALOGUE_NAME)


@pytest.mark.unit
def test_offline_and_not_in_either_cache_names_the_hub_repository(tmp_path, offline_hub, monkeypatch):
    monkeypatch.setenv("VITLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("socket.socket.connect", lambda *a: pytest.fail("the network was used"))
    with pytest.raises(CheckpointError) as error:
        vitlab.load(CATALOGUE_NAME)
    message = str(error.value)
    assert "\n" not in message and f"nor in the HF cache ({CATALOGUE_REPO}) and offline" in message
    assert f"`hf download {CATALOGUE_REPO} model.safetensors`" in message


@pytest.mark.unit
def test_weights_list_says_which_entries_the_hf_cache_holds(tmp_path, offline_hub, monkeypatch, capsys):
    from vitlab.cli import main

    monkeypatch.setenv("VITLAB_CACHE", str(tmp_path / "cache"))
    hub_cache(offline_hub, CATALOGUE_REPO, {"model.safetensors": timm_weights_file(tmp_path, tiny_model())})
    assert main(["weights", "list", "--model", "Ti/16"]) == 0
    rows = {line.split()[0]: line.split()[4] for line in capsys.readouterr().out.splitlines() if line.startswith("Ti/")}
    assert rows[CATALOGUE_NAME] == "hf" and rows["Ti/16:augreg-in21k"] == "-"


@pytest.mark.unit
def test_a_transformers_copy_in_the_hf_cache_is_read_as_a_folder(
    tmp_path, offline_hub, no_network, monkeypatch, caplog
):
    """An entry with Google's transformers repository and no timm one (as L/16:orig-in21k-ft-in1k-224):
    its snapshot folder, config.json beside the weights, as from_pretrained leaves it."""
    from vitlab.weights import catalogue

    entry = dataclasses.replace(catalogue.find(CATALOGUE_NAME), timm_id=None, hf_id="google/vit-tiny-test")
    monkeypatch.setitem(catalogue.CATALOGUE, CATALOGUE_NAME, entry)
    model = randomise_(vitlab.create_model("Ti/16", num_classes=1000, act="gelu_tanh"), std=0.05).eval()
    folder = model.save_pretrained(tmp_path / "hf-format", format="hf")
    snapshot = hub_cache(offline_hub, "google/vit-tiny-test", {p.name: p for p in folder.iterdir()})
    batch = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))

    with caplog.at_level("INFO", logger="vitlab"):
        loaded = vitlab.load(CATALOGUE_NAME)
    assert f"reading google/vit-tiny-test from the Hugging Face cache ({snapshot})" in caplog.text
    assert loaded.config.preprocessing == entry.preprocessing and loaded.config.act == "gelu_tanh"
    with torch.no_grad():
        assert (loaded(batch) - model(batch)).abs().max().item() <= 1e-5

    (snapshot / "config.json").unlink()  # the weights alone are not a transformers model: the bucket instead
    with pytest.raises(AssertionError, match="the network was used"):
        vitlab.load(CATALOGUE_NAME)
