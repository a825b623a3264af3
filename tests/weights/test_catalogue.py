"""The pretrained-weights catalogue: names, the official files, download into the cache from a
local mirror laid out like the real sources, checksums, trust on first use, offline use."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import http.server
import re
import threading
from pathlib import Path

import PIL.Image
import pytest
import torch

import vitlab
from helpers import randomise_
from vitlab.cli import main
from vitlab.model import ConfigError, config_for
from vitlab.weights import CatalogueError, CheckpointError
from vitlab.weights.catalogue import (
    CATALOGUE,
    Download,
    Pretrained,
    find,
    is_catalogue_name,
    list_pretrained,
    timm_hub_id,
)
from vitlab.weights.fetch import cache_path, fetch
from vitlab.weights.pretrained import default_tag, resolve_pretrained

# The smallest catalogue model; tests write a randomly initialised one of its exact shape.
TINY = "Ti/16:augreg-in21k-ft-in1k"


@pytest.fixture
def mirror(tmp_path, monkeypatch) -> Path:
    """An empty mirror (file://) and an empty cache, both in tmp_path, set through the environment."""
    root = tmp_path / "mirror"
    root.mkdir()
    monkeypatch.setenv("VITLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("VITLAB_WEIGHTS_MIRROR", root.as_uri())
    monkeypatch.delenv("VITLAB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return root


def mirror_file(root: Path, url: str) -> Path:
    """Where a URL's file lies on the mirror: ROOT/HOST/PATH."""
    return root / url.split("://", 1)[1]


@functools.lru_cache(maxsize=1)
def _tiny_weights() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """A random model of TINY's exact shape (Ti/16, 224 px, 1000 classes), an input and its logits."""
    entry = find(TINY)
    model = randomise_(
        vitlab.create_model(entry.model, num_classes=entry.num_classes, act="gelu_tanh"), std=0.05
    ).eval()
    images = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(images)
    return model, images, logits


def publish(root: Path, name: str = TINY) -> tuple[Path, torch.Tensor, torch.Tensor]:
    """Put a random model of the entry's shape on the mirror at its official path."""
    model, images, logits = _tiny_weights()
    target = mirror_file(root, find(name).downloads[0].url)
    vitlab.export_npz(model, target)
    return target, images, logits


# -- the table -------------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("entry", list(CATALOGUE.values()), ids=lambda e: e.name)
def test_every_entry_names_a_registered_model_and_an_official_file(entry: Pretrained):
    config = config_for(entry.model, image_size=entry.image_size)  # raises for unknown models or sizes
    assert config.image_size == (entry.image_size, entry.image_size)
    assert entry.downloads[0].url.startswith("https://storage.googleapis.com/vit_models/")
    assert entry.downloads[0].url.endswith(".npz")
    assert entry.license == "Apache-2.0" and entry.mean == (0.5,) * 3 and entry.std == (0.5,) * 3
    # The paper's in21k files have a zeroed head: feature extractors (num_classes 0), as timm serves them.
    assert entry.num_classes == {"augreg-in21k": 21843, "orig-in21k": 0}.get(entry.tag, 1000)
    assert entry.zeroed_head == (entry.tag == "orig-in21k") and entry.file_num_classes in (21843, 1000)
    for download in entry.downloads:
        assert download.sha256 is None or re.fullmatch(r"[0-9a-f]{8,64}", download.sha256)
    assert find(entry.name) is entry and is_catalogue_name(entry.name)


@pytest.mark.unit
def test_augreg_files_and_sizes_agree_with_timms_records():
    """timm records the same official files; every AugReg entry must point where timm's config does."""
    registry = pytest.importorskip("timm.models._registry")
    checked = 0
    for entry in list_pretrained():
        if entry.timm_id is None:
            continue
        cfg = registry.get_pretrained_cfg(entry.timm_id.removeprefix("timm/"))
        assert cfg is not None, entry.timm_id
        assert cfg.input_size[-1] == entry.image_size, entry.name
        assert cfg.num_classes == entry.num_classes, entry.name  # 0 where timm records the head as not valid
        if "augreg" in entry.tag:
            assert cfg.url == entry.downloads[0].url, entry.name
            checked += 1
    # 26 plain ViTs and the 9 files of the three AugReg hybrids (R+Ti/16, R26+S/32, R50+L/32)
    assert checked == sum("augreg" in entry.tag for entry in list_pretrained()) == 35
    hybrids = {entry.model for entry in list_pretrained() if "augreg" in entry.tag and "+" in entry.model}
    assert hybrids == {"R+Ti/16", "R26+S/32", "R50+L/32"}


@pytest.mark.unit
@pytest.mark.parametrize("entry", list(CATALOGUE.values()), ids=lambda e: e.name)
def test_every_entry_names_timms_hub_repository_exactly_where_timm_has_one(entry: Pretrained):
    """timm_hub_id's rule against timm's own pretrained configs: their hf_hub_id where timm has the weights."""
    timm = pytest.importorskip("timm")
    name = timm_hub_id(entry.model, entry.image_size, entry.tag).removeprefix("timm/")
    on_timm = timm.list_pretrained(name) == [name]
    assert entry.timm_id == (timm.models.get_pretrained_cfg(name).hf_hub_id if on_timm else None)
    # the HF cache is searched, timm's first, where the Hub's files are the entry's model: not the zeroed-head ones
    expected = () if entry.zeroed_head else tuple(repo for repo in (entry.timm_id, entry.hf_id) if repo)
    assert entry.hub_repos == expected


@pytest.mark.unit
def test_original_weights_have_timms_sha256_prefix_as_second_source():
    entry = find("B/16:orig-in21k-ft-in1k-224")
    assert entry.image_size == 224 and entry.downloads[0].url.endswith("imagenet21k+imagenet2012/ViT-B_16-224.npz")
    assert entry.downloads[1] == Download(
        "https://github.com/rwightman/pytorch-image-models/releases/download/v0.1-vitjx/jx_vit_base_p16_224-80ecf9dd.pth",
        sha256="80ecf9dd",
    )
    assert find("B/16:orig-in21k-ft-in1k").image_size == 384  # the paper fine-tunes at 384


@pytest.mark.unit
@pytest.mark.parametrize(
    "name, message",
    [
        ("B/16:augreg-in22k", "unknown tag 'augreg-in22k' for B/16; its tags: augreg-in1k"),
        ("M/16:augreg-in21k", "no pretrained weights for model 'M/16'"),
        ("B16-augreg", "write MODEL:TAG"),
    ],
)
def test_unknown_names_say_what_exists(name, message):
    with pytest.raises(CatalogueError, match=re.escape(message)):
        find(name)


# -- download, cache, checksums --------------------------------------------------------------------
@pytest.mark.integration
def test_create_model_downloads_from_mirror_verifies_and_records_digest(mirror, caplog):
    published, images, logits = publish(mirror)
    with caplog.at_level("INFO", logger="vitlab"):
        model = vitlab.create_model("Ti/16", pretrained="augreg-in21k-ft-in1k")
    assert "trust on first use" in caplog.text
    cached = cache_path(find(TINY).downloads[0].url)
    assert cached.read_bytes() == published.read_bytes()
    record = cached.with_name(cached.name + ".sha256").read_text().strip()
    assert record == hashlib.sha256(published.read_bytes()).hexdigest()
    assert model.config.name == TINY and model.config.act == "gelu_tanh"
    assert model.config.class_names[:2] == ["tench", "goldfish"] and len(model.config.class_names) == 1000
    assert model.config.preprocessing == find(TINY).preprocessing
    with torch.no_grad():
        assert torch.allclose(model(images), logits, atol=1e-5)


@pytest.mark.integration
def test_cache_is_used_offline_and_damage_is_caught(mirror, monkeypatch):
    published, images, logits = publish(mirror)
    vitlab.load(TINY)
    published.unlink()  # the source is gone
    monkeypatch.setenv("VITLAB_OFFLINE", "1")
    model = vitlab.load(TINY, num_classes=3)  # load's overrides apply: a new zero-initialised head
    assert model.config.num_classes == 3 and not model.head.weight.any() and model.config.class_names is None

    cached = cache_path(find(TINY).downloads[0].url)
    cached.write_bytes(cached.read_bytes()[:-10])
    with pytest.raises(CheckpointError, match="damaged or was replaced"):
        vitlab.load(TINY)


@pytest.mark.unit
def test_offline_without_cache_names_the_missing_file(mirror, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CheckpointError, match=r"not in the cache .*Ti_16-i21k.* and offline"):
        vitlab.load(TINY)


@pytest.mark.unit
def test_unreachable_source_lists_every_url_tried(mirror):
    with pytest.raises(CheckpointError) as error:
        vitlab.load("B/16:orig-in21k")
    message = str(error.value)
    assert "imagenet21k/ViT-B_16.npz" in message and "jx_vit_base_patch16_224_in21k-e5005f0a.pth" in message
    assert "VITLAB_WEIGHTS_MIRROR" in message


@pytest.mark.unit
def test_a_file_that_is_not_the_named_model_is_not_cached(mirror):
    publish(mirror)  # Ti/16 with 1000 classes ...
    wrong = mirror_file(mirror, find("Ti/16:augreg-in21k").downloads[0].url)  # ... where 21843 are expected
    wrong.parent.mkdir(parents=True, exist_ok=True)
    wrong.write_bytes(mirror_file(mirror, find(TINY).downloads[0].url).read_bytes())
    with pytest.raises(CheckpointError, match=r"is not this model: classes 1000 \(expected 21843\)"):
        vitlab.create_model("Ti/16", pretrained="augreg-in21k")
    cached = cache_path(find("Ti/16:augreg-in21k").downloads[0].url)
    assert not cached.parent.exists() or not any(cached.parent.iterdir())


@pytest.mark.unit
def test_create_model_rejects_weights_of_another_model(mirror):
    with pytest.raises(ConfigError, match="holds weights of Ti/16, not of S/16"):
        vitlab.create_model("S/16", pretrained=TINY)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep the test output clean
        pass


@pytest.fixture
def http_mirror(tmp_path, monkeypatch):
    """A mirror served over HTTP on a free loopback port."""
    root = tmp_path / "served"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("VITLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("VITLAB_WEIGHTS_MIRROR", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.delenv("VITLAB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield root
    server.shutdown()
    server.server_close()


def _entry(first_sha: str | None, second_sha: str | None) -> Pretrained:
    """A two-source entry for Ti/16; the first source is missing from the mirror, the second is there."""
    base = find(TINY)
    return Pretrained(
        model=base.model,
        tag="test",
        image_size=base.image_size,
        num_classes=base.num_classes,
        dataset="",
        paper="",
        downloads=(
            Download("https://example.invalid/gone.npz", first_sha),
            Download("https://example.invalid/w.npz", second_sha),
        ),
    )


@pytest.mark.unit
def test_http_mirror_falls_back_to_the_second_source_and_checks_its_sha256(http_mirror):
    model, _, _ = _tiny_weights()
    target = vitlab.export_npz(model, http_mirror / "example.invalid" / "w.npz")
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    checked = []

    path = fetch(
        _entry(None, digest[:8]), check=lambda file: checked.append(file.read_bytes())
    )  # a prefix, as in timm's names
    assert path.read_bytes() == target.read_bytes() and checked == [target.read_bytes()]  # checked before it was kept
    assert path.with_name("w.npz.sha256").read_text().strip() == digest


@pytest.mark.unit
def test_wrong_checksum_is_refused_and_nothing_is_kept(http_mirror):
    model, _, _ = _tiny_weights()
    vitlab.export_npz(model, http_mirror / "example.invalid" / "w.npz")
    with pytest.raises(
        CheckpointError, match=r"gone\.npz \(File not found\); .*w\.npz has sha256 [0-9a-f]+\.\.\., expected deadbeef"
    ):
        fetch(_entry(None, "deadbeef"), check=lambda path: None)
    assert not cache_path("https://example.invalid/w.npz").exists()
    assert not list(cache_path("https://example.invalid/w.npz").parent.glob("*partial*"))


# -- the command line ---------------------------------------------------------------------------------
@pytest.mark.unit
def test_weights_list_command(capsys):
    assert main(["weights", "list", "--model", "B/16", "--urls"]) == 0
    out = capsys.readouterr().out
    assert "B/16:augreg-in21k " in out and "B/16:orig-in21k-ft-in1k-224" in out and "Ti/16" not in out
    assert "sha256 80ecf9dd" in out and "hf://google/vit-base-patch16-224" in out
    assert re.search(r"B/16:augreg-in21k\s+224\s+21843\s+tofu\s+-\s+Apache-2.0", out)


@pytest.mark.integration
def test_weights_fetch_command_and_errors(mirror, capsys):
    publish(mirror)
    assert main(["weights", "fetch", TINY]) == 0
    assert f"{TINY}: ok, 5.7M parameters, 1000 classes" in capsys.readouterr().out
    assert main(["weights", "list", "--model", "Ti/16"]) == 0
    assert re.search(r"Ti/16:augreg-in21k-ft-in1k\s+224\s+1000\s+tofu\s+yes", capsys.readouterr().out)
    assert main(["weights", "fetch", "Ti/16:nope"]) == 2
    assert "unknown tag 'nope'" in capsys.readouterr().err


# -- pretrained=True, timm names, the hybrids, the zeroed-head feature extractors ---------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_pretrained_true_and_timm_names_pick_the_catalogue_entry(mirror, caplog):
    _, images, logits = publish(mirror)  # TINY is Ti/16's default tag: ImageNet-1k at 224 px
    with caplog.at_level("INFO", logger="vitlab"):
        model = vitlab.create_model("Ti/16", pretrained=True)
    assert model.config.name == TINY and f"the weights {TINY}" in caplog.text
    same = vitlab.create_model("vit_tiny_patch16_224.augreg_in21k_ft_in1k", pretrained=True)
    assert same.config.name == TINY
    with torch.no_grad():
        assert torch.allclose(same(images), logits, atol=1e-5)
    assert resolve_pretrained("vit_tiny_patch16_224", True) == ("Ti/16", "augreg-in21k-ft-in1k", 224)
    assert resolve_pretrained("vit_base_patch16_384", True) == ("B/16", "augreg-in21k-ft-in1k-384", 384)
    assert default_tag("L/32") == "orig-in21k-ft-in1k"  # no classifier at 224 px: the 384-px one, not features


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_augreg_hybrid_downloads_and_loads_as_registered(mirror):
    from vitlab.weights.hybrid import export_hybrid_npz

    name = "R+Ti/16:augreg-in21k-ft-in1k"
    model = randomise_(vitlab.create_model("R+Ti/16", num_classes=1000, act="gelu_tanh"), std=0.05).eval()
    export_hybrid_npz(model, mirror_file(mirror, find(name).downloads[0].url))
    loaded = vitlab.create_model("R+Ti/16", pretrained="augreg-in21k-ft-in1k")
    assert loaded.config.grid_size == (7, 7) and loaded.config.patch_size == 8  # 8x8 patches on the stem's map
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (loaded(x) - model(x)).abs().max() < 1e-4 and model(x).abs().max() > 0.1


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.fault("bad-input", kinds=2)
def test_orig_in21k_is_a_feature_extractor_of_pre_logits_and_says_it_has_no_classes(mirror, monkeypatch):
    from vitlab.evaluate import predict_images

    # A Ti/16 stand-in of the B/16 file's layout: tanh pre-logits layer and an all-zero 21843-way head.
    entry = dataclasses.replace(find("B/16:orig-in21k"), model="Ti/16")
    monkeypatch.setitem(CATALOGUE, "Ti/16:orig-in21k", entry)
    source = randomise_(
        vitlab.create_model("Ti/16", num_classes=21843, representation_size=192, act="gelu_tanh"), std=0.05
    )
    torch.nn.init.zeros_(source.head.weight)
    torch.nn.init.zeros_(source.head.bias)
    target = mirror_file(mirror, entry.downloads[0].url)
    vitlab.export_npz(source.eval(), target)
    model = vitlab.load("Ti/16:orig-in21k")
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        features = model(x)
        expected = source.forward_head(source.forward_features(x), pre_logits=True)
    assert model.config.num_classes == 0 and features.shape == (2, 192)
    assert (features - expected).abs().max() < 1e-5 and features.abs().max() > 0.1  # the tanh representation
    with pytest.raises(ValueError, match="feature extractor .* no classes to predict"):
        predict_images(model, [PIL.Image.new("RGB", (224, 224))])
    finetune = vitlab.load("Ti/16:orig-in21k", num_classes=3)  # fine-tuning drops it, as the paper does
    assert finetune.config.representation_size is None and finetune.head.out_features == 3

    with torch.no_grad():
        source.head.bias.fill_(0.5)  # a head that is not zero is not the catalogued release
    cache_path(entry.downloads[0].url).unlink()
    vitlab.export_npz(source, target)
    with pytest.raises(CheckpointError, match="head that is not zero"):
        vitlab.load("Ti/16:orig-in21k")
