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
@pytest.mark.parametrize("global_pool", ["", "avg", "max", "avgmax", "token"])
@pytest.mark.parametrize("num_classes", [0, 10])
def test_reset_classifier_takes_timms_pools_as_timm_does(tmp_path, global_pool, num_classes):
    model, peer = pair(tmp_path)  # a class-token model: every pool runs beside its class token
    model.reset_classifier(num_classes, global_pool)
    peer.reset_classifier(num_classes, global_pool)
    assert model.global_pool == peer.global_pool and model.num_classes == peer.num_classes
    x = images()
    with torch.no_grad():
        ours, theirs = model.forward_features(x), peer.forward_features(x)
        assert close(model.forward_head(ours, pre_logits=True), peer.forward_head(theirs, pre_logits=True))
        assert model(x).shape == peer(x).shape
    if num_classes:  # the pool travels with the config: a saved folder computes the same
        model.save_pretrained(tmp_path / "run")
        with torch.no_grad():
            assert torch.equal(vitlab.load(tmp_path / "run")(x), model(x))


@pytest.mark.unit
@pytest.mark.fault("bad-fields", kinds=4)
def test_reset_classifier_refuses_what_the_built_model_cannot_pool(tmp_path):
    gap = vitlab.create_model("Ti/16", image_size=32, depth=1, pool="gap", gap_norm="after_pool", num_classes=2)
    with pytest.raises(ConfigError, match="global_pool='token': this model was built without a class token"):
        gap.reset_classifier(5, "token")
    with pytest.raises(ConfigError, match="normalises the pooled vector"):
        gap.reset_classifier(5, "")  # its norm sits after pooling: every token would go unnormalised
    with pytest.raises(ConfigError, match="global_pool='map'"):
        gap.reset_classifier(5, "map")
    with pytest.raises(ConfigError, match="global_pool=\\['cat'\\]"):
        gap.reset_classifier(5, ["cat"])  # class names go in class_names=
    gap.reset_classifier(3, "max", class_names=["a", "b", "c"])
    assert gap.config.pool == "max" and gap.config.class_names == ["a", "b", "c"]


@pytest.mark.unit
def test_forward_intermediates_output_dict_is_timms(tmp_path):
    model, peer = pair(tmp_path)
    x = images()
    with torch.no_grad():
        for kwargs in [dict(), dict(indices=2, return_prefix_tokens=True), dict(intermediates_only=True, norm=True)]:
            ours = model.forward_intermediates(x, output_dict=True, **kwargs)
            theirs = peer.forward_intermediates(x, output_dict=True, **kwargs)
            assert sorted(ours) == sorted(theirs) and all(close(ours[k], theirs[k]) for k in ours), kwargs


@pytest.mark.unit
@pytest.mark.parametrize(
    "kwargs", [dict(), dict(indices=[0, 1]), dict(indices=2, prune_norm=True), dict(indices=1, prune_head=False)]
)
def test_prune_intermediate_layers_is_timms(tmp_path, kwargs):
    model, peer = pair(tmp_path)
    assert model.prune_intermediate_layers(**kwargs) == peer.prune_intermediate_layers(**kwargs)
    assert len(model.blocks) == len(peer.blocks) == model.config.depth
    x = images()
    indices = kwargs.get("indices", 1)
    with torch.no_grad():
        assert close(model.forward_intermediates(x, indices), peer.forward_intermediates(x, indices))
        assert close(model(x), peer(x))
    if kwargs.get("prune_norm") or kwargs.get("prune_head", True) is False:
        return
    model.save_pretrained(tmp_path / "pruned")  # the head is gone and the config says so
    assert vitlab.load(tmp_path / "pruned").config.num_classes == 0


@pytest.mark.unit
def test_a_model_pruned_of_its_norm_is_not_saved_as_its_config(tmp_path):
    model, _ = pair(tmp_path)
    model.prune_intermediate_layers(2, prune_norm=True)
    with pytest.raises(ConfigError, match="no longer matches its config.*missing keys: norm.bias, norm.weight"):
        model.save_pretrained(tmp_path / "pruned")
    assert not (tmp_path / "pruned").exists()


@pytest.mark.unit
def test_feature_info_and_patch_embed_sizes_are_timms(tmp_path):
    model, peer = pair(tmp_path)
    assert model.feature_info == peer.feature_info
    for size in (None, (48, 64)):
        if size is not None:
            model.set_input_size(img_size=size)
            peer.set_input_size(img_size=size)
        for name in ("img_size", "grid_size", "num_patches"):
            assert getattr(model.patch_embed, name) == getattr(peer.patch_embed, name), (size, name)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_bit_resnets_pretrained_cfg_is_read_by_timm_as_its_own(tmp_path):
    pre = dict(mean=(0.2, 0.3, 0.4), std=(0.3, 0.3, 0.3), crop_pct=0.95, interpolation="bilinear")
    model = vitlab.create_model("BiT-R50x1", image_size=64, num_classes=3, preprocessing=pre)
    vitlab.save_pretrained(model, tmp_path / "timm", format="timm")
    peer = timm.create_model(f"local-dir:{tmp_path / 'timm'}", pretrained=True)
    assert model.pretrained_cfg["architecture"] == "resnetv2_50x1_bit"
    theirs = {k: tuple(v) if isinstance(v, list) else v for k, v in timm.data.resolve_model_data_config(peer).items()}
    assert timm.data.resolve_model_data_config(model) == theirs


# timm's keywords, with the vitlab field each sets.
TIMM_KEYWORDS = dict(img_size=48, in_chans=1, drop_path_rate=0.1, drop_rate=0.2, global_pool="avg", embed_dim=96)


@pytest.mark.unit
def test_create_model_takes_timms_keywords():
    ours = vitlab.create_model("vit_tiny_patch16_224", depth=2, num_heads=3, mlp_ratio=2.0, **TIMM_KEYWORDS)
    with torch.device("meta"):
        theirs = timm.create_model("vit_tiny_patch16_224", depth=2, num_heads=3, mlp_ratio=2.0, **TIMM_KEYWORDS)
    config = ours.config
    assert (config.image_size, config.in_channels, config.drop_path, config.head_dropout) == ((48, 48), 1, 0.1, 0.2)
    assert (config.pool, config.dim, config.mlp_dim) == ("gap", 96, 192) and ours.global_pool == theirs.global_pool
    assert sorted(k for k in ours.state_dict()) == sorted(
        "pos_embed.weight" if k == "pos_embed" else k for k in theirs.state_dict()
    )
    with pytest.raises(ConfigError, match="image_size is given twice"):
        vitlab.create_model("Ti/16", img_size=32, image_size=32)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("vit_base_patch16_gap_224", marks=pytest.mark.unit),
        pytest.param("deit_small_patch16_224", marks=pytest.mark.unit),
        pytest.param("deit_base_patch16_384", marks=pytest.mark.unit),
        pytest.param("resnetv2_50x1_bit", marks=[pytest.mark.slow, pytest.mark.timeout(600)]),
    ],
)
def test_create_model_takes_timms_other_names(tmp_path, name):
    """Built from timm's name in both libraries, shrunk alike where the name allows: the same
    parameters, and timm's logits on vitlab's weights."""
    shrink = {} if name.startswith("resnetv2") else dict(depth=1)
    ours = randomise_(vitlab.create_model(name, num_classes=5, **shrink), std=0.05).eval()
    theirs = timm.create_model(name, num_classes=5, **shrink).eval()
    assert sorted(p.numel() for p in ours.parameters()) == sorted(p.numel() for p in theirs.parameters())
    if name.startswith("resnetv2"):
        return  # 25M parameters: the shapes say it; test_peers runs a BiT through timm
    vitlab.save_pretrained(ours, tmp_path / "timm", format="timm")
    peer = timm.create_model(f"local-dir:{tmp_path / 'timm'}", pretrained=True).eval()
    x = images(ours.config.image_size[0])
    with torch.no_grad():
        assert close(ours(x), peer(x))
    assert type(peer.blocks[0].attn).__name__ == type(theirs.blocks[0].attn).__name__


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
