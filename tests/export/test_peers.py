"""Folders for timm and transformers: each library builds the model from the folder alone and
computes vitlab's logits; what a library cannot hold is refused before anything is written."""

from __future__ import annotations

import dataclasses
import json
import types

import pytest
import torch

import vitlab
from helpers import randomise_
from vitlab.cli import main
from vitlab.export import ExportMismatchError, TracePlan, export_model
from vitlab.model import ConfigError, ViTConfig

timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5
NAMES = ["cat", "dog", "emu", "fox", "gnu"]


def tiny(image_size: int = 32, **options) -> vitlab.VisionTransformer:
    """A Ti-width, two-block ViT with random weights (std 0.2: logits of order 1, heads included)."""
    return randomise_(
        vitlab.create_model("Ti/16", image_size=image_size, depth=2, num_classes=5, class_names=NAMES, **options)
    ).eval()


def images_for(model, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, *model.config.image_size, generator=torch.Generator().manual_seed(0))


def timm_from(model, folder) -> torch.nn.Module:
    model.save_pretrained(folder, format="timm")
    return timm.create_model(f"local-dir:{folder}", pretrained=True).eval()


# -- timm ------------------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize(
    "options",
    [
        dict(image_size=32),
        dict(image_size=48),  # class token at two resolutions
        dict(pool="gap", gap_norm="after_pool"),
        dict(pool="gap", gap_norm="before_pool"),  # timm's avg, fc_norm or not
        dict(act="gelu_tanh", pos_embed="none", qkv_bias=False),
    ],
    ids=["token-32", "token-48", "gap-fc-norm", "gap-norm-first", "tanh-no-pos-no-qkv-bias"],
)
def test_timm_builds_the_folder_and_computes_vitlabs_logits(tmp_path, options):
    model = tiny(**options)
    peer = timm_from(model, tmp_path / "timm")
    images = images_for(model)
    with torch.no_grad():
        expected, got = model(images), peer(images)
    assert expected.abs().max() > 0.3  # random heads: a zero output would not test anything
    assert (got - expected).abs().max().item() < TOLERANCE
    assert peer.pretrained_cfg["label_names"] == NAMES and peer.num_classes == 5
    assert timm.data.resolve_data_config(model=peer)["input_size"] == (3, *model.config.image_size)


@pytest.mark.unit
def test_timm_folder_has_timms_layout_and_carries_preprocessing(tmp_path):
    pre = dict(mean=(0.1, 0.2, 0.3), std=(0.4, 0.5, 0.6), crop_pct=0.95, interpolation="bilinear")
    model = tiny(preprocessing=pre)
    peer = timm_from(model, tmp_path / "timm")
    document = json.loads((tmp_path / "timm" / "config.json").read_text())
    assert {"architecture", "num_classes", "num_features", "label_names", "model_args", "pretrained_cfg"} <= set(
        document
    )
    assert timm.is_model(document["architecture"])
    data = timm.data.resolve_data_config(model=peer)
    assert tuple(data["mean"]) == pre["mean"] and tuple(data["std"]) == pre["std"]
    assert (data["crop_pct"], data["interpolation"], data["crop_mode"]) == (0.95, "bilinear", "center")


@pytest.mark.parametrize(
    "architecture",
    [
        pytest.param("vit_tiny_r_s16_p8_224", marks=pytest.mark.integration),
        pytest.param("vit_small_r26_s32_224", marks=[pytest.mark.slow, pytest.mark.timeout(600)]),
    ],
)
def test_timm_hybrids_go_back_to_timm(tmp_path, architecture):
    """A timm hybrid read by vitlab (with timm's backbone numerics) is written back for timm."""
    from safetensors.torch import save_file

    source = randomise_(timm.create_model(architecture, img_size=64, depth=1, num_classes=3), std=0.05).eval()
    save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(tmp_path / "hybrid.safetensors"))
    model = vitlab.load(tmp_path / "hybrid.safetensors", num_heads=source.blocks[0].attn.num_heads)
    peer = timm_from(model, tmp_path / "timm")
    x = images_for(model)
    with torch.no_grad():
        expected = source(x)
        assert expected.abs().max() > 0.05
        assert (peer(x) - expected).abs().max().item() < TOLERANCE and (
            model(x) - expected
        ).abs().max().item() < TOLERANCE


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_bit_resnet_goes_to_timms_resnetv2_bit_and_transformers_bit(tmp_path):
    model = vitlab.create_model("BiT-R50x1", num_classes=4, image_size=64, class_names=NAMES[:4])
    with torch.no_grad():  # random weights; GroupNorm scales near 1 keep the activations of order 1
        generator = torch.Generator().manual_seed(0)
        for name, param in model.named_parameters():
            param.copy_(
                torch.randn(param.shape, generator=generator) * 0.05 + float("norm" in name and name.endswith("weight"))
            )
    vitlab.save_pretrained(model.eval(), tmp_path / "timm", format="timm")
    peer = timm.create_model(f"local-dir:{tmp_path / 'timm'}", pretrained=True).eval()
    x = images_for(model)
    with torch.no_grad():
        expected = model(x)
        # 50 weight-standardised layers in float32 (timm standardises through batch_norm): 1e-4, not 1e-5
        assert expected.abs().max() > 0.3 and (peer(x) - expected).abs().max().item() < 1e-4
    assert peer.pretrained_cfg["label_names"] == NAMES[:4]
    vitlab.save_pretrained(model, tmp_path / "hf", format="hf")
    hf_peer = transformers.AutoModelForImageClassification.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        assert type(hf_peer).__name__ == "BitForImageClassification"
        assert (hf_peer(pixel_values=x).logits - expected).abs().max().item() < 1e-4
    assert [hf_peer.config.id2label[i] for i in range(4)] == NAMES[:4]


# -- transformers ----------------------------------------------------------------------------------
@pytest.mark.integration
@pytest.mark.parametrize(
    "options",
    [dict(image_size=32), dict(image_size=48, act="gelu_tanh", qkv_bias=False, norm_eps=1e-12)],
    ids=["token-32", "token-48-tanh"],
)
def test_transformers_loads_the_folder_and_computes_vitlabs_logits(tmp_path, options):
    model = tiny(**options)
    model.save_pretrained(tmp_path / "hf", format="hf")
    peer = transformers.ViTForImageClassification.from_pretrained(tmp_path / "hf").eval()
    images = images_for(model)
    with torch.no_grad():
        expected, got = model(images), peer(pixel_values=images).logits
    assert expected.abs().max() > 0.3
    assert (got - expected).abs().max().item() < TOLERANCE
    assert [peer.config.id2label[i] for i in range(5)] == NAMES


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_cli_exports_both_and_prints_the_peers_logit_difference(tmp_path, capsys):
    tiny().save_pretrained(tmp_path / "run")
    for fmt in ("timm", "hf"):
        assert main(["export", "--ckpt", str(tmp_path / "run"), "--format", fmt, "--out", str(tmp_path / fmt)]) == 0
        out = capsys.readouterr().out
        difference = float(out.split("max |logit difference| ")[1].split()[0])
        assert difference < TOLERANCE and f"({fmt}," in out


# -- refusals --------------------------------------------------------------------------------------
@dataclasses.dataclass
class FutureConfig(ViTConfig):
    """A config with an option vitlab does not have yet: the writers must refuse it unwritten."""

    pos_embed_at: str = "input"


REFUSED = [
    ("hf", dict(pool="gap"), "pool='gap'"),
    ("timm", dict(pool="flatten"), "pool='flatten'"),
    ("hf", dict(representation_size=16), "representation_size=16"),
    ("timm", dict(representation_size=16), "representation_size=16"),
    ("timm", dict(head_dim=32), "head_dim=32"),
    ("hf", dict(head_dim=32), "head_dim=32"),
    ("timm", dict(head_hidden=(16,)), "head_hidden=(16,)"),
    ("hf", dict(mlp_out_act=True), "mlp_out_act=True"),
    ("timm", dict(pos_embed="2d"), "pos_embed='2d'"),
    ("hf", dict(pos_embed="sincos"), "pos_embed='sincos'"),
    ("timm", dict(pos_embed="relative"), "pos_embed='relative'"),
    ("timm", dict(pos_embed="relative_bias"), "pos_embed='relative_bias'"),
    ("timm", dict(pos_embed_at="every_layer"), "pos_embed_at='every_layer'"),
    ("hf", dict(pos_embed_at="every_layer_shared"), "pos_embed_at='every_layer_shared'"),
    ("hf", dict(pos_embed="none"), "pos_embed='none'"),
    ("timm", dict(norm_eps=1e-12), "norm_eps=1e-12"),
]


@pytest.mark.integration
@pytest.mark.fault("bad-input", kinds=len(REFUSED) + 6)
def test_what_a_peer_cannot_hold_is_refused_in_one_line_before_writing(tmp_path):
    def refused(model, fmt, match):
        target = tmp_path / f"out-{fmt}"
        with pytest.raises(ConfigError, match=match) as error:
            vitlab.save_pretrained(model, target, format=fmt)
        assert "\n" not in str(error.value) and f"--format {fmt}" in str(error.value)
        assert not target.exists()  # nothing written

    for fmt, options, named in REFUSED:
        model = vitlab.create_model("Ti/16", image_size=32, depth=1, num_classes=3, **options)
        refused(model, fmt, named.replace("(", r"\(").replace(")", r"\)"))
    hybrid = vitlab.create_model("R20-small+Ti/4", depth=1, num_classes=3)
    refused(hybrid, "hf", "transformers has no ResNet")
    refused(hybrid, "timm", r"units \(2, 2, 2\)")  # timm has no such hybrid
    refused(vitlab.create_model("R26+S/32", depth=1, num_classes=3), "timm", "weight_std='vit_jax'")
    refused(vitlab.create_model("BiT-R26x1-small", num_classes=3), "timm", "timm cannot hold this BiT ResNet")
    refused(vitlab.create_model("BiT-R26x1-small", num_classes=3), "hf", "transformers' BiT cannot hold stem='small'")
    future = vitlab.create_model("Ti/16", image_size=32, depth=1, num_classes=3)
    future.config = FutureConfig(**{**dataclasses.asdict(future.config), "pos_embed_at": "every_layer"})
    refused(future, "timm", "option pos_embed_at='every_layer'")


# -- the check after writing ---------------------------------------------------------------------------
class Shifted(torch.nn.Module):
    """A peer whose logits are off by `shift`: what a wrong export would compute."""

    def __init__(self, model, shift: float) -> None:
        super().__init__()
        self.model, self.shift = model, shift

    def forward(self, images=None, pixel_values=None):
        if pixel_values is not None:  # transformers' call and output
            return types.SimpleNamespace(logits=self.model(pixel_values) + self.shift)
        return self.model(images) + self.shift


@pytest.mark.unit
@pytest.mark.parametrize("fmt", ["timm", "hf"])
def test_a_folder_that_fails_its_check_is_removed(tmp_path, monkeypatch, fmt):
    import vitlab.export.peer_check as peer_check

    model = tiny()
    monkeypatch.setattr(peer_check, "open_peer", lambda folder, format: Shifted(model, 1e-3))
    with pytest.raises(ExportMismatchError, match="disagrees"):
        export_model(model, fmt, tmp_path / fmt)
    assert not (tmp_path / fmt).exists()  # nothing half-checked is left to be used
    (tmp_path / "kept").mkdir()
    with pytest.raises(ExportMismatchError):
        export_model(model, fmt, tmp_path / "kept")
    assert (tmp_path / "kept").is_dir()  # a folder that was there before is the caller's


@pytest.mark.unit
def test_a_bit_resnets_check_is_relative_to_its_logits():
    """50+ weight-standardised layers leave float32 differences that grow with the logits (1.09e-4
    at logits of 22 in the audit, 5e-6 of them). A BiT's bound is the tolerance times its largest
    logit (times 1 below that); a ViT's stays absolute."""
    bit = vitlab.create_model("BiT-R26x1-small", num_classes=3).eval()
    with torch.no_grad():
        bit.head.bias.fill_(20.0)  # logits of about 20, as a trained classifier's
    off_by_relative = lambda images: bit(images) * (1 + 1e-5)  # noqa: E731
    result = TracePlan(dynamic_batch=False).check(bit, off_by_relative, "bit")
    assert result.relative and result.bound == pytest.approx(1e-4 * result.max_abs_logit)
    assert result.max_abs_diff > 1e-4 and "the largest logit (at least 1)" in str(result)
    vit = tiny()
    with torch.no_grad():
        vit.head.bias.fill_(20.0)
    with pytest.raises(ExportMismatchError):
        TracePlan(dynamic_batch=False).check(vit, lambda images: vit(images) * (1 + 1e-5), "vit")
