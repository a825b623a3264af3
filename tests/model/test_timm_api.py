"""timm's interface on vitlab's ViT, each part checked against timm's own model with the same
weights (built by timm from the folder vitlab writes for it)."""

from __future__ import annotations

import pytest
import torch

import vitlab
from helpers import randomise_
from vitlab.model import ConfigError
from vitlab.model.aliases import TIMM_HYBRIDS, TIMM_PLAIN, from_timm_name

timm = pytest.importorskip("timm")


def pair(tmp_path, **options):
    """(vitlab model, timm's model with the same weights), both in eval mode."""
    model = randomise_(vitlab.create_model("Ti/16", image_size=32, depth=3, num_classes=4, **options)).eval()
    model.save_pretrained(tmp_path / "timm", format="timm")
    return model, timm.create_model(f"local-dir:{tmp_path / 'timm'}", pretrained=True).eval()


def images(size: int = 32, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(1))


def close(a, b) -> bool:
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    # fp32 to 1e-5 of the tensor's scale: vitlab's eager fp32 GEMMs may run in oneDNN (kernels.fp32_gemm)
    # and timm's in MKL, whose orders of summation differ (1.1e-5 apart on block outputs of size 10)
    return a.shape == b.shape and (a - b).abs().max().item() < 1e-5 * max(1.0, b.abs().max().item())


@pytest.mark.unit
@pytest.mark.parametrize("pool", ["token", "gap"])
def test_attributes_and_data_config_are_timms(tmp_path, pool):
    pre = dict(mean=(0.2, 0.3, 0.4), std=(0.3, 0.3, 0.3), crop_pct=0.8, interpolation="bilinear")
    model, peer = pair(tmp_path, pool=pool, preprocessing=pre)
    for name in ("num_classes", "num_features", "embed_dim", "num_prefix_tokens", "global_pool", "has_class_token"):
        assert getattr(model, name) == getattr(peer, name), name
    assert (
        model.get_classifier() is model.head
        and model.get_classifier().weight.shape == peer.get_classifier().weight.shape
    )
    ours, theirs = timm.data.resolve_data_config(model=model), timm.data.resolve_data_config(model=peer)
    assert ours["mean"] == pre["mean"] and ours["crop_pct"] == 0.8 and ours["interpolation"] == "bilinear"
    assert {k: tuple(v) if isinstance(v, list) else v for k, v in theirs.items()} == ours
    assert model.default_cfg == model.pretrained_cfg


@pytest.mark.integration
def test_forward_intermediates_and_get_intermediate_layers_match_timm(tmp_path):
    model, peer = pair(tmp_path)
    x = images()
    with torch.no_grad():
        for kwargs in [
            dict(),
            dict(indices=2),
            dict(indices=[0, -1], norm=True),
            dict(output_fmt="NLC", return_prefix_tokens=True),
            dict(indices=[1], stop_early=True, intermediates_only=True),
        ]:
            assert close(model.forward_intermediates(x, **kwargs), peer.forward_intermediates(x, **kwargs)), kwargs
        for kwargs in [dict(), dict(n=2, reshape=True, norm=True), dict(n=[0, 2], return_prefix_tokens=True)]:
            assert close(model.get_intermediate_layers(x, **kwargs), peer.get_intermediate_layers(x, **kwargs)), kwargs
        final, _ = model.forward_intermediates(x)
        assert close(model.forward_head(final), model(x))


@pytest.mark.unit
def test_group_matcher_gives_timms_layer_decay_groups(tmp_path):
    from timm.optim import param_groups_layer_decay

    model, peer = pair(tmp_path)

    def groups(m, rename=lambda n: n):
        named = dict(m.named_parameters())
        ids = {id(p): rename(n) for n, p in named.items()}
        result = param_groups_layer_decay(
            m, weight_decay=0.05, no_weight_decay_list=m.no_weight_decay(), layer_decay=0.75
        )
        return sorted(
            (round(g["lr_scale"], 6), g["weight_decay"], tuple(sorted(ids[id(p)] for p in g["params"]))) for g in result
        )

    ours = groups(model, rename=lambda n: "pos_embed" if n == "pos_embed.weight" else n)
    assert ours == groups(peer) and len(ours) > 4


@pytest.mark.unit
def test_reset_classifier_has_timms_signature_and_refuses_a_pool_it_cannot_take(tmp_path):
    model, peer = pair(tmp_path)
    with pytest.raises(ConfigError, match="global_pool='avg'"):
        model.reset_classifier(10, "avg")  # was stored as the class names; the folder then failed to load
    model.reset_classifier(10, "token")
    peer.reset_classifier(10, "token")
    assert model.num_classes == 10 and model.head.weight.shape == peer.head.weight.shape
    model.reset_classifier(3, class_names=["a", "b", "c"])
    model.save_pretrained(tmp_path / "run")
    assert vitlab.load(tmp_path / "run").config.class_names == ["a", "b", "c"]
    gap = vitlab.create_model("Ti/16", image_size=32, depth=1, pool="gap", num_classes=2)
    gap.reset_classifier(5, "avg")
    with pytest.raises(ConfigError, match="global_pool='token'"):
        gap.reset_classifier(5, "token")


@pytest.mark.unit
def test_set_input_size_resamples_as_timm(tmp_path):
    model, peer = pair(tmp_path)
    model.set_input_size(img_size=(48, 48))
    peer.set_input_size(img_size=(48, 48))
    with torch.no_grad():
        assert close(model(images(48)), peer(images(48)))
    assert timm.data.resolve_data_config(model=model)["input_size"] == (3, 48, 48)
    with pytest.raises(ConfigError, match="patch_size"):
        model.set_input_size(patch_size=8)


@pytest.mark.unit
@pytest.mark.parametrize("name", sorted(TIMM_PLAIN) + [f"{arch}_224" for arch in TIMM_HYBRIDS])
def test_timm_names_are_aliases_with_timms_shapes(name):
    assert timm.is_model(name), name
    with torch.device("meta"):
        ours = vitlab.create_model(name, num_classes=7)
        theirs = timm.create_model(name, num_classes=7)
    ours_shapes = sorted(tuple(p.shape) for p in ours.parameters())
    assert ours_shapes == sorted(tuple(p.shape) for p in theirs.parameters())
    size = int(name.rsplit("_", 1)[1])
    assert ours.config.image_size == (size, size) and from_timm_name(name).model == ours.config.name


@pytest.mark.unit
def test_timm_tags_map_to_catalogue_tags():
    assert from_timm_name("vit_base_patch16_384.augreg_in21k_ft_in1k").tag == "augreg-in21k-ft-in1k-384"
    assert from_timm_name("vit_base_patch16_224.orig_in21k_ft_in1k").tag == "orig-in21k-ft-in1k-224"
    assert from_timm_name("vit_small_r26_s32_224.augreg_in21k").model == "R26+S/32"
    with pytest.raises(ConfigError, match="not a timm ViT vitlab builds"):
        vitlab.create_model("vit_giant_patch14_224")
