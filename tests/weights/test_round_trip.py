"""Every model kind vitlab writes, to every format that takes it (timm and HF folders, the vit_jax
npz), read back by vitlab.load: the same logits (1e-6), class names and preprocessing. A writer that
refuses a kind says why in one line; npz records no class names and no preprocessing (the reader
takes vit_jax's and says so), and no numerics (passed back as the export's own check does)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import pytest
import torch

import vitlab
from helpers import images, randomise_
from vitlab.config_fields import crop_mode_for
from vitlab.export import export_model
from vitlab.model import ConfigError, ResNetConfig
from vitlab.weights.preprocessing import VIT_JAX_PREPROCESSING

NAMES = ["cat", "dog", "emu", "fox"]
PRE = dict(mean=(0.1, 0.2, 0.3), std=(0.4, 0.5, 0.6), crop_pct=0.9, interpolation="bilinear")
TIMM_BACKBONE = ResNetConfig(layers=(), norm_eps=1e-5, weight_std="timm", weight_std_eps=1e-8)


def vit(**options) -> Callable[[], torch.nn.Module]:
    def build():
        fields = dict(image_size=32, depth=2, num_classes=4, class_names=NAMES, preprocessing=PRE) | options
        return vitlab.create_model("Ti/16", **fields)

    return build


def hybrid(backbone: ResNetConfig | None) -> Callable[[], torch.nn.Module]:
    def build():
        options = {"backbone": backbone} if backbone else {}
        return vitlab.create_model("R+Ti/16", image_size=64, depth=1, num_classes=4, class_names=NAMES, **options)

    return build


def bit() -> torch.nn.Module:
    model = vitlab.create_model("BiT-R50x1", image_size=64, num_classes=4, class_names=NAMES, preprocessing=PRE)
    with torch.no_grad():  # GroupNorm scales near 1 keep 50 layers' activations of order 1
        generator = torch.Generator().manual_seed(0)
        for name, param in model.named_parameters():
            scale = float("norm" in name and name.endswith("weight"))
            param.copy_(torch.randn(param.shape, generator=generator) * 0.05 + scale)
    return model


KINDS: dict[str, Callable[[], torch.nn.Module]] = {
    "token": vit(),
    "gap-fc-norm": vit(pool="gap", gap_norm="after_pool"),
    "gap-norm-first": vit(pool="gap", gap_norm="before_pool", act="gelu_tanh"),
    "tanh-no-qkv-bias": vit(act="gelu_tanh", qkv_bias=False),
    "eps-1e-12": vit(norm_eps=1e-12),
    "no-pos-embed": vit(pos_embed="none"),
    "wide": vit(image_size=(32, 48)),
    "squash-square": vit(preprocessing=PRE | dict(crop_mode="squash")),
    "unnamed": vit(class_names=None),
    "representation": vit(representation_size=48),
    "head-dim": vit(head_dim=32),
    "hybrid-vit-jax": hybrid(None),
    "hybrid-timm": hybrid(TIMM_BACKBONE),
    "registers": vit(register_tokens=2),
    "distilled": vit(distillation_token=True),
    "layer-scale": vit(init_values=0.5),
    "qk-norm": vit(qk_norm=True),
    "norm-pre": vit(pre_norm=True),
    "quick-gelu": vit(act="quick_gelu"),
    "swiglu": vit(gated_mlp=True, act="silu"),
    "map": vit(pool="map", act="gelu_tanh"),
    "bit": bit,
    "axial": lambda: vitlab.create_model("Axial-Ti/16", image_size=32, depth=1, num_classes=4),
}
# (kind, format) -> what the refusal names; every other pair is written and read back.
REFUSED = {
    ("gap-fc-norm", "hf"): "pool='gap'",
    ("gap-norm-first", "hf"): "pool='gap'",
    ("no-pos-embed", "hf"): "pos_embed='none'",
    ("no-pos-embed", "npz"): "pos_embed='none'",
    ("gap-fc-norm", "npz"): "gap_norm='after_pool'",
    ("representation", "timm"): "representation_size=48",
    ("representation", "hf"): "representation_size=48",
    ("eps-1e-12", "timm"): "norm_eps=1e-12",
    ("head-dim", "timm"): "head_dim=32",
    ("head-dim", "hf"): "head_dim=32",
    ("hybrid-vit-jax", "timm"): "standardises weights",
    ("hybrid-vit-jax", "hf"): "transformers has no ResNet + ViT model",
    ("hybrid-timm", "hf"): "transformers has no ResNet + ViT model",
    ("bit", "npz"): "not a BiT ResNet",
    ("axial", "timm"): "a AxialViT is not a model vitlab writes for timm",
    ("axial", "hf"): "a AxialViT is not a model vitlab writes for hf",
    ("axial", "npz"): "not a AxialViT",
    ("swiglu", "hf"): "hf cannot hold act='silu'",
    ("swiglu", "npz"): "gated_mlp=True (no place",
    ("map", "hf"): "pool='map'",
    ("map", "npz"): "pool='map'",
    # transformers' ViT and the paper's layout predate these parts
    **{
        (kind, fmt): f"{option} (no place" if fmt == "npz" else f"option {option} has no place in hf's ViT"
        for kind, option in [
            ("registers", "register_tokens=2"),
            ("distilled", "distillation_token=True"),
            ("layer-scale", "init_values=0.5"),
            ("qk-norm", "qk_norm=True"),
            ("norm-pre", "pre_norm=True"),
        ]
        for fmt in ("hf", "npz")
    },
}
FORMATS = ("timm", "hf", "npz")
SLOW_KINDS = ("bit",)  # a ResNet-50: seconds per forward on two cores


def tier(kind: str):
    marks = [pytest.mark.slow, pytest.mark.timeout(900)] if kind in SLOW_KINDS else [pytest.mark.unit]
    return pytest.param(kind, marks=marks, id=kind)


def write(model, fmt: str, path):
    """The writer `vitlab export --format FMT` calls (npz: export's own, which refuses a BiT ResNet)."""
    if fmt == "npz":
        return export_model(model, "npz", path / "model.npz")[0]
    return vitlab.save_pretrained(model, path / fmt, format=fmt)


def effective(preprocessing, image_size) -> tuple:
    """What a preprocessing does to an image: statistics, resampling, crop mode and the size it
    resizes to (a crop_pct read back from a processor's sizes may differ in digits that change none)."""
    return (
        tuple(preprocessing.mean),
        tuple(preprocessing.std),
        preprocessing.interpolation,
        crop_mode_for(image_size, preprocessing.crop_mode),
        tuple(math.floor(side / preprocessing.crop_pct) for side in image_size),
    )


@pytest.fixture(scope="module")
def models():
    """Each kind built once, on first use, with random weights."""
    built: dict[str, torch.nn.Module] = {}

    def get(kind: str) -> torch.nn.Module:
        if kind not in built:
            torch.manual_seed(0)
            model = KINDS[kind]()
            built[kind] = (model if kind == "bit" else randomise_(model, std=0.1)).eval()
        return built[kind]

    return get


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", [tier(kind) for kind in KINDS])
def test_written_and_read_back_or_refused_saying_why(tmp_path, models, kind, fmt, caplog):
    model = models(kind)
    if (kind, fmt) in REFUSED:
        with pytest.raises((ConfigError, ValueError)) as refusal:
            write(model, fmt, tmp_path)
        assert REFUSED[kind, fmt] in str(refusal.value) and "\n" not in str(refusal.value)
        assert not any(tmp_path.iterdir())  # refused before anything is written
        return
    written = write(model, fmt, tmp_path)
    config = model.config
    overrides = {}
    if fmt == "npz":  # the layout holds no numerics: given back, as export's own check does
        overrides = dict(act=config.act, norm_eps=config.norm_eps, image_size=config.image_size)
        if getattr(config, "backbone", None) is not None:
            overrides["backbone"] = config.backbone
    with caplog.at_level(logging.INFO, logger="vitlab"):
        loaded = vitlab.load(written, **overrides)
    x = images(*config.image_size)
    with torch.no_grad():
        expected, got = model(x), loaded(x)
    assert expected.abs().max() > 0.1  # random weights: the logits are not all zero
    assert (got - expected).abs().max().item() <= 1e-6
    assert type(loaded) is type(model) and loaded.config.image_size == config.image_size
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"{written}: preprocessing ")]
    assert len(said) == 1  # the load says which preprocessing it uses, and where it came from
    if fmt == "npz":
        assert loaded.config.class_names is None and "vit_jax's" in said[0]
        assert loaded.config.preprocessing == VIT_JAX_PREPROCESSING
        return
    assert loaded.config.class_names == config.class_names
    assert effective(loaded.config.preprocessing, config.image_size) == effective(
        config.preprocessing, config.image_size
    )
