"""Official vit_jax .npz: the official-code fixture, both module numberings, export_npz round trips."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

import vitlab
from helpers import TOLERANCE, VIT_JAX_FIXTURE, images, random_eval
from vitlab.model import ViTConfig, create_untrained
from vitlab.weights import CheckpointError
from vitlab.weights.npz import CURRENT, RELEASED

pytestmark = pytest.mark.unit

TINY = dict(image_size=32, patch_size=8, dim=32, depth=2, num_heads=4, mlp_dim=64, num_classes=6, act="gelu_tanh")


def test_official_fixture_is_in_the_repository():
    """The parity tests below must run on every clone: a missing fixture fails here instead of skipping."""
    for fixture in ("vit_ti16_token", "vit_p8_gap"):
        for name in (f"{fixture}.params.npz", f"{fixture}.io.npz"):
            assert (VIT_JAX_FIXTURE / name).is_file(), f"official-code fixture {name} missing from {VIT_JAX_FIXTURE}"


def fixture_io(fixture: str = "vit_ti16_token") -> tuple[torch.Tensor, torch.Tensor]:
    io = np.load(VIT_JAX_FIXTURE / f"{fixture}.io.npz")
    return torch.from_numpy(io["x_nhwc"].transpose(0, 3, 1, 2).copy()), torch.from_numpy(io["logits"])


# The GAP fixture's model (its README) in vitlab's names, with Flax's tanh-GELU; nothing names GAP's order.
GAP_FIXTURE_MODEL = dict(image_size=32, dim=64, depth=2, num_heads=2, mlp_dim=128, num_classes=5, act="gelu_tanh")


def test_a_gap_model_built_from_vitlab_names_pools_as_vit_jax():
    """vit_jax models_vit.py: `encoded = nn.LayerNorm(name='encoder_norm')(x)` on every token, then
    `x = jnp.mean(x, axis=...)` for classifier 'gap'. A model built by name must compute that by default."""
    official = vitlab.load(VIT_JAX_FIXTURE / "vit_p8_gap.params.npz")
    assert (official.config.pool, official.config.gap_norm) == ("gap", "before_pool")
    named = vitlab.create_model("B/8", pool="gap", **GAP_FIXTURE_MODEL).eval()
    assert named.config.gap_norm == "before_pool"
    named.load_state_dict(official.state_dict())  # the same modules: the encoder norm, no fc_norm
    x, logits = fixture_io("vit_p8_gap")
    with torch.no_grad():
        torch.testing.assert_close(named(x), logits, **TOLERANCE)


def test_the_gap_fixture_tells_the_two_orders_apart():
    """timm's order on the same weights misses the official logits by far more than the tolerance."""
    official = vitlab.load(VIT_JAX_FIXTURE / "vit_p8_gap.params.npz")
    timm_order = vitlab.create_model("B/8", pool="gap", gap_norm="after_pool", **GAP_FIXTURE_MODEL).eval()
    state = {
        key.replace("norm.", "fc_norm.") if key.startswith("norm.") else key: value
        for key, value in official.state_dict().items()
    }
    timm_order.load_state_dict(state)
    x, logits = fixture_io("vit_p8_gap")
    with torch.no_grad():
        assert (timm_order(x) - logits).abs().max() > 1e-3


def test_official_fixture_loads_with_inferred_architecture_and_gives_its_logits():
    model = vitlab.load(VIT_JAX_FIXTURE / "vit_ti16_token.params.npz")
    config = model.config
    assert (config.image_size, config.patch_size, config.dim, config.mlp_dim) == ((64, 64), 16, 64, 128)
    assert (config.num_heads, config.depth, config.num_classes, config.pool) == (4, 3, 10, "token")
    assert config.representation_size is None
    assert (config.act, config.norm_eps, config.pos_resample) == ("gelu_tanh", 1e-6, "linear_zoom")
    x, logits = fixture_io()
    with torch.no_grad():
        torch.testing.assert_close(model(x), logits, **TOLERANCE)


def test_official_fixture_numerics_matter():
    """Exact GELU (timm's and HF's) misses the official logits by far more than the tolerance."""
    model = vitlab.load(VIT_JAX_FIXTURE / "vit_ti16_token.params.npz", act="gelu")
    x, logits = fixture_io()
    with torch.no_grad():
        assert (model(x) - logits).abs().max() > 1e-4


def renumbered(path, names_from, names_to, out):
    """The same checkpoint under the other Flax module numbering."""
    arrays = dict(np.load(path))
    renamed = {}
    for key, value in arrays.items():
        for old, new in zip(vars(names_from).values(), vars(names_to).values()):
            key = key.replace(f"/{old}/", f"/{new}/")
        renamed[key] = value
    np.savez(out, **renamed)
    return out


def test_current_flax_module_numbering_loads_the_same(tmp_path):
    current = renumbered(VIT_JAX_FIXTURE / "vit_ti16_token.params.npz", RELEASED, CURRENT, tmp_path / "current.npz")
    assert any("MlpBlock_0" in key for key in np.load(current).files)
    x, logits = fixture_io()
    with torch.no_grad():
        torch.testing.assert_close(vitlab.load(current)(x), logits, **TOLERANCE)


def test_big_vision_layout_loads_the_same(tmp_path):
    """big_vision: params/ prefix, top-level pos_embedding, layers stacked on a leading axis."""
    arrays = dict(
        np.load(renumbered(VIT_JAX_FIXTURE / "vit_ti16_token.params.npz", RELEASED, CURRENT, tmp_path / "c.npz"))
    )
    stacked: dict[str, list[np.ndarray]] = {}
    flat = {}
    for key, value in arrays.items():
        if key.startswith("Transformer/encoderblock_"):
            index, rest = key.removeprefix("Transformer/encoderblock_").split("/", 1)
            stacked.setdefault(rest, [None] * 3)[int(index)] = value
        elif key == "Transformer/posembed_input/pos_embedding":
            flat["pos_embedding"] = value
        else:
            flat[key] = value
    flat.update({f"Transformer/encoderblock/{rest}": np.stack(values) for rest, values in stacked.items()})
    np.savez(tmp_path / "bv.npz", **{f"params/{key}": value for key, value in flat.items()})
    x, logits = fixture_io()
    with torch.no_grad():
        torch.testing.assert_close(vitlab.load(tmp_path / "bv.npz")(x), logits, **TOLERANCE)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"pool": "gap", "gap_norm": "before_pool"},
        {"representation_size": 24},
        {"pool": "gap", "gap_norm": "before_pool", "representation_size": 16, "qkv_bias": False},
        {"num_heads": 2, "head_dim": 8},  # inner width 16 != D: the (D, heads, head_dim) kernels carry it
        {"num_classes": 0},
        {"in_channels": 1, "patch_size": 16},
    ],
    ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "token",
)
def test_export_npz_round_trip_is_exact(tmp_path, options):
    model = random_eval(create_untrained(ViTConfig(**{**TINY, **options})))
    path = vitlab.export_npz(model, tmp_path / "model")
    assert path.suffix == ".npz"
    arrays = np.load(path)
    assert "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel" in arrays.files
    assert ("cls" in arrays.files) == (model.config.pool == "token")
    assert ("pre_logits/kernel" in arrays.files) == bool(model.config.representation_size)
    loaded = vitlab.load(path)
    for field in (
        "pool",
        "representation_size",
        "num_heads",
        "attn_head_dim",
        "qkv_bias",
        "num_classes",
        "in_channels",
        "patch_size",
        "image_size",
        "depth",
        "mlp_dim",
    ):
        assert getattr(loaded.config, field) == getattr(model.config, field), field
    assert model.config.pool == "token" or loaded.config.gap_norm == "before_pool"
    x = images(channels=model.config.in_channels)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_non_square_export_loads_with_its_image_size(tmp_path):
    model = random_eval(create_untrained(ViTConfig(**{**TINY, "image_size": (32, 48)})))
    path = vitlab.export_npz(model, tmp_path / "wide.npz")
    with pytest.raises(CheckpointError, match="pass image_size"):
        vitlab.load(path)
    loaded = vitlab.load(path, image_size=(32, 48))
    x = images(32, 48)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_timm_npz_loader_gives_the_same_logits(tmp_path):
    """timm's own reader of official checkpoints, on a timm ViT with Flax's tanh-GELU."""
    timm_vit = pytest.importorskip("timm.models.vision_transformer")
    for pool in ("token", "gap"):
        model = random_eval(create_untrained(ViTConfig(**{**TINY, "pool": pool, "gap_norm": "before_pool"})))
        path = vitlab.export_npz(model, tmp_path / f"{pool}.npz")
        peer = timm_vit.VisionTransformer(
            img_size=32,
            patch_size=8,
            embed_dim=32,
            depth=2,
            num_heads=4,
            mlp_ratio=2.0,
            num_classes=6,
            act_layer="gelu_tanh",
            class_token=pool == "token",
            global_pool="token" if pool == "token" else "avg",
            fc_norm=False,
        ).eval()
        timm_vit._load_weights(peer, str(path))
        x = images()
        with torch.no_grad():
            torch.testing.assert_close(peer(x), model(x), **TOLERANCE)


def test_export_refuses_what_the_format_cannot_hold(tmp_path):
    for options, culprit in (
        ({"pos_embed": "2d"}, "pos_embed='2d'"),
        ({"pos_embed_at": "every_layer_shared"}, "pos_embed_at='every_layer_shared'"),
        ({"pool": "gap", "gap_norm": "after_pool"}, "after_pool"),
        ({"head_hidden": (16,)}, "head_hidden"),
    ):
        with pytest.raises(ValueError, match=culprit):
            vitlab.export_npz(create_untrained(ViTConfig(**{**TINY, **options})), tmp_path / "x.npz")
    # an Axial-ViT whose config fields all fit the layout: its row and column blocks still do not
    axial = create_untrained("Axial-Ti/16", image_size=32, num_classes=3, gap_norm="before_pool")
    with pytest.raises(ValueError, match="plain VisionTransformer, not a AxialViT"):
        vitlab.export_npz(axial, tmp_path / "x.npz")
    assert not (tmp_path / "x.npz").exists()


def test_export_warns_when_numerics_differ_from_vit_jax(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        vitlab.export_npz(create_untrained(ViTConfig(**{**TINY, "act": "gelu"})), tmp_path / "x.npz")
    assert "tanh-GELU" in caplog.text


def test_resampling_at_load_is_vit_jax_linear_zoom(tmp_path, caplog):
    scipy_ndimage = pytest.importorskip("scipy.ndimage")
    model = random_eval(create_untrained(ViTConfig(**TINY)))
    path = vitlab.export_npz(model, tmp_path / "m.npz")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="vitlab"):
        loaded = vitlab.load(path, image_size=56, num_classes=3)
    said = [r.getMessage().split(": ", 1)[1] for r in caplog.records if r.name == "vitlab"]
    assert len(said) == 3 and said[0].startswith("preprocessing ")  # what it uses, then the two changes
    # vit_jax checkpoint.py: zoom the (gs, gs, D) grid without the class slot, order=1.
    table = np.load(path)["Transformer/posembed_input/pos_embedding"]
    grid = table[0, 1:].reshape(4, 4, -1)
    expected = scipy_ndimage.zoom(grid, (7 / 4, 7 / 4, 1), order=1).reshape(1, 49, -1)
    got = loaded.pos_embed.weight.detach().numpy()
    np.testing.assert_allclose(got[:, 1:], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[:, :1], table[:, :1])
    assert loaded.config.num_classes == 3 and torch.count_nonzero(loaded.head.weight) == 0


def test_npz_keys_without_a_place_are_named(tmp_path):
    model = create_untrained(ViTConfig(**TINY))
    path = vitlab.export_npz(model, tmp_path / "m.npz")
    arrays = dict(np.load(path))
    arrays["Transformer/encoderblock_0/LayerScale_0/scale"] = np.ones(32, np.float32)
    arrays["MAPHead_0/probe"] = np.ones((1, 1, 32), np.float32)
    np.savez(tmp_path / "extra.npz", **arrays)
    with pytest.raises(CheckpointError, match=r"cannot hold a MAP attention-pool head .* \(key MAPHead_0/probe\)"):
        vitlab.load(tmp_path / "extra.npz")
    del arrays["MAPHead_0/probe"]
    np.savez(tmp_path / "extra.npz", **arrays)
    with pytest.raises(CheckpointError, match="no place for: Transformer/encoderblock_0/LayerScale_0/scale"):
        vitlab.load(tmp_path / "extra.npz")
    del arrays["Transformer/encoderblock_0/LayerScale_0/scale"]
    arrays["head/kernel"] = arrays["head/kernel"][:5]  # (D-1, K): no longer fits the width
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(CheckpointError, match=r"head.weight \(6, 5\) vs model \(6, 32\)"):
        vitlab.load(tmp_path / "bad.npz")


def test_not_an_npz_and_pickled_arrays_are_refused(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="junk.npz"):
        vitlab.load(tmp_path / "junk.npz")
    np.savez(tmp_path / "objects.npz", **{"embedding/kernel": np.array([{"a": 1}], dtype=object)})
    with pytest.raises(CheckpointError, match="pickled objects"):
        vitlab.load(tmp_path / "objects.npz")
