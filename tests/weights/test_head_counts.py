"""The head count of timm and torchvision files, which do not record it: right or refused, for every
ViT architecture the two libraries define, and what vitlab's ViT cannot hold is refused by name."""

from __future__ import annotations

import re

import pytest
import torch

import vitlab
from helpers import TOLERANCE, images, random_eval, save_state_dict
from vitlab.weights import CheckpointError
from vitlab.weights.head_table import ACTIVATIONS, TORCHVISION_MODELS, timm_names
from vitlab.weights.timm import convert_timm
from vitlab.weights.torchvision import convert_torchvision

timm = pytest.importorskip("timm")
timm_vit = pytest.importorskip("timm.models.vision_transformer")

REFUSAL = r"pass num_heads=|cannot hold|has no place for|not a vitlab model|does not compute"


def read_heads(library: str, model: torch.nn.Module, name: str) -> tuple[int, str] | None:
    """(head count, activation) vitlab reads off the (meta) state dict's shapes; None where it refuses."""
    state = model.state_dict()
    try:
        if library == "timm":
            grid = model.patch_embed.grid_size  # timm's grid: a 384 px image holds 27 patches of 14
            size = tuple(g * p for g, p in zip(grid, model.patch_embed.patch_size))
            config, _ = convert_timm(state, name, {"image_size": size})
        else:
            config, _ = convert_torchvision(state, name, {})
    except CheckpointError as error:
        assert error.args[0].startswith(f"{name}: ") and "\n" not in error.args[0]
        assert re.search(REFUSAL, error.args[0]), error.args[0]
        return None
    return config.num_heads, config.act


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_timm_and_torchvision_vit_gets_its_head_count_or_is_refused():
    """Meta-device builds: shapes only, nothing allocated (vit_giant too)."""
    import torchvision.models

    read, refused = {}, []
    for name in timm_names():
        with torch.device("meta"):
            model = timm.create_model(name, weight_init="skip")  # the shapes only
        heads = read_heads("timm", model, name)
        block = model.blocks[0]
        expected = (block.attn.num_heads, ACTIVATIONS.get(type(block.mlp.act).__name__)) if heads else None
        (refused.append(name) if heads is None else read.__setitem__(name, (heads, expected)))
    for name in TORCHVISION_MODELS:
        with torch.device("meta"):
            model = getattr(torchvision.models, name)()
        heads = read_heads("torchvision", model, name)
        expected = (model.encoder.layers[0].self_attention.num_heads, "gelu")
        (refused.append(name) if heads is None else read.__setitem__(name, (heads, expected)))
    wrong = {name: pair for name, pair in read.items() if pair[0] != pair[1]}
    assert not wrong, f"wrong (head count, activation) (read, defined): {wrong}"
    # timm 1.0.31 and torchvision: 136 read (registers, DeiT's distillation token, SigLIP's MAP heads, CLIP
    # towers and DINOv2-giant's gated MLP among them), 62 refused (CLIP's QuickGELU twins ask for act=)
    assert len(read) >= 136 and len(read) + len(refused) >= 198, (len(read), len(refused))
    assert {"vit_large_patch14_reg4_dinov2", "deit_base_distilled_patch16_224"} <= set(read)
    assert {"vit_base_patch16_siglip_224", "vit_so400m_patch14_siglip_224"} <= set(read)
    # The cases of the shapes-alone trap: width / 64 would give 22 heads; 12 and 16 share shapes.
    assert read["vit_giant_patch14_224"][0] == (16, "gelu")
    assert read["vit_huge_patch14_224"][0] == (16, "gelu") and read["vit_h_14"][0] == (16, "gelu")
    assert read["vit_so400m_patch16_siglip_gap_256"][0] == (16, "gelu_tanh")
    assert "vit_base_patch16_gap_224" in refused
    assert {"vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14"} <= set(read)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "name, options",
    [
        ("vit_tiny_patch16_224", dict(img_size=32)),
        ("vit_tiny_r_s16_p8_224", dict(img_size=32)),  # a hybrid: ResNet stem + ViT
    ],
)
def test_small_timm_architectures_load_without_num_heads(tmp_path, name, options):
    peer = random_eval(timm.create_model(name, num_classes=5, **options))
    model = vitlab.load(save_state_dict(peer, tmp_path / "w.safetensors"))
    assert model.config.num_heads == peer.blocks[0].attn.num_heads
    x = images(options["img_size"])
    with torch.no_grad():
        expected = peer(x)
        torch.testing.assert_close(model(x), expected, **TOLERANCE)
    assert expected.abs().max() > 1e-2


@pytest.mark.unit
@pytest.mark.fault("bad-checkpoint", kinds=4)
def test_shapes_shared_by_several_head_counts_ask_for_num_heads(tmp_path):
    """vit_base_patch16_gap_224 (16 heads) has the shapes of timm's SigLIP base models (12)."""
    with torch.device("meta"):
        gap = timm.create_model("vit_base_patch16_gap_224", weight_init="skip")
    with pytest.raises(CheckpointError, match=r"^gap: .* in 2 ways \(12 heads.*16 heads.*\); pass num_heads=$"):
        convert_timm(gap.state_dict(), "gap", {})
    assert convert_timm(gap.state_dict(), "gap", {"num_heads": 16})[0].num_heads == 16
    with torch.device("meta"):  # the same shapes with tanh-GELU (vit_large_patch16_siglip_gap_512) or exact
        large = timm.create_model("vit_large_patch16_siglip_gap_512", weight_init="skip").state_dict()
    with pytest.raises(CheckpointError, match=r"2 ways .*16 heads, gelu,.*16 heads, gelu_tanh.*num_heads= and act=$"):
        convert_timm(large, "large", {"image_size": 512})
    with pytest.raises(CheckpointError, match=r"^large: .* 16 heads and each of gelu, gelu_tanh; pass act=$"):
        convert_timm(large, "large", {"image_size": 512, "num_heads": 16})
    chosen, _ = convert_timm(large, "large", {"image_size": 512, "num_heads": 16, "act": "gelu_tanh"})
    assert chosen.act == "gelu_tanh"
    tiny = save_state_dict(
        random_eval(timm_vit.VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4)),
        tmp_path / "tiny.pth",
    )
    with pytest.raises(CheckpointError, match=r"tiny\.pth: .* no timm architecture has their signature .*num_heads="):
        vitlab.load(tiny)


@pytest.mark.unit
@pytest.mark.fault("bad-checkpoint", kinds=1)
@pytest.mark.parametrize(
    "options, named",
    [
        (dict(mlp_layer=timm.layers.SwiGLU, act_layer=torch.nn.SiLU), "a SwiGLU MLP"),
        (dict(embed_norm_layer=torch.nn.LayerNorm), "a norm after the patch embedding"),
    ],
    ids=["swiglu", "embed_norm"],
)
def test_what_vitlab_cannot_hold_is_refused_by_name(tmp_path, options, named):
    peer = timm_vit.VisionTransformer(img_size=32, patch_size=8, embed_dim=64, depth=1, num_heads=4, **options)
    path = save_state_dict(peer, tmp_path / "peer.safetensors")
    with pytest.raises(CheckpointError, match=rf"peer\.safetensors: vitlab's ViT cannot hold {named}"):
        vitlab.load(path, num_heads=4)
