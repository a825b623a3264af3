"""Checkpoints that must not load: each gets one CheckpointError naming the file and the culprit."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

import vitlab
from helpers import MarkerPayload, images, random_eval, save_state_dict
from vitlab.model import ViTConfig, create_untrained
from vitlab.weights import CheckpointError

timm_vit = pytest.importorskip("timm.models.vision_transformer")


@pytest.mark.unit
@pytest.mark.fault("pickles")
def test_malicious_pickle_is_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pth"
    torch.save({"patch_embed.proj.weight": torch.zeros(1), "payload": MarkerPayload(marker)}, path)
    with pytest.raises(CheckpointError, match=r"evil\.pth: refused to unpickle"):
        vitlab.load(path)
    assert not marker.exists()
    # The payload is live: an unrestricted unpickler does run it.
    torch.load(path, weights_only=False)
    assert marker.exists()


@pytest.mark.unit
@pytest.mark.fault("bad-checkpoint", kinds=5)
def test_unknown_formats_name_the_file(tmp_path):
    (tmp_path / "weights.txt").write_text("hello")
    with pytest.raises(CheckpointError, match=r"weights\.txt: unknown checkpoint format"):
        vitlab.load(tmp_path / "weights.txt")
    save_file({"encoder.weight": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(CheckpointError, match=r"other\.safetensors: unknown checkpoint format.*encoder\.weight"):
        vitlab.load(tmp_path / "other.safetensors")
    (tmp_path / "broken.pth").write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match=r"broken\.pth"):
        vitlab.load(tmp_path / "broken.pth")
    (tmp_path / "folder").mkdir()
    with pytest.raises(CheckpointError, match=r"folder: unknown checkpoint format"):
        vitlab.load(tmp_path / "folder")
    (tmp_path / "folder" / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(CheckpointError, match=r"folder: unknown checkpoint format"):
        vitlab.load(tmp_path / "folder")


@pytest.mark.unit
@pytest.mark.fault("bad-checkpoint")
def test_bare_vitlab_weights_ask_for_their_folder(tmp_path):
    model = create_untrained(ViTConfig(image_size=32, patch_size=8, dim=32, depth=1, num_heads=2, mlp_dim=64))
    model.save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="without their config"):
        vitlab.load(tmp_path / "model.safetensors")


@pytest.mark.unit
@pytest.mark.fault("bad-checkpoint")
def test_overrides_may_not_contradict_the_weights(tmp_path):
    model = create_untrained(ViTConfig(image_size=32, patch_size=8, dim=32, depth=2, num_heads=4, mlp_dim=64))
    model.save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match=r"num_heads=8 \(checkpoint: 4\), pool='gap' \(checkpoint: 'token'\)"):
        vitlab.load(tmp_path, num_heads=8, pool="gap")
    assert vitlab.load(tmp_path, num_heads=4, drop_path=0.1).config.drop_path == 0.1  # repeating is fine


def timm_tiny(**options):
    return random_eval(
        timm_vit.VisionTransformer(
            img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=3, **options
        )
    )


@pytest.mark.integration
def test_training_checkpoint_wrappers_are_unwrapped(tmp_path):
    peer = timm_tiny()
    state = {f"module.{key}": value for key, value in peer.state_dict().items()}
    torch.save({"state_dict": state, "epoch": 3}, tmp_path / "train.pth")
    model = vitlab.load(tmp_path / "train.pth", num_heads=4)
    x = images()
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), rtol=1e-5, atol=1e-5)


@pytest.mark.unit
@pytest.mark.fault("bad-checkpoint")
def test_timm_models_vitlab_cannot_express_are_refused_with_their_keys(tmp_path):
    normed = save_state_dict(timm_tiny(embed_norm_layer=torch.nn.LayerNorm), tmp_path / "normed.safetensors")
    with pytest.raises(
        CheckpointError, match=r"normed\.safetensors: vitlab's ViT cannot hold a norm after the patch embedding"
    ):
        vitlab.load(normed, num_heads=4)


@pytest.mark.integration
@pytest.mark.fault("bad-checkpoint", kinds=2)
def test_hf_folders_without_weights_or_with_other_activations(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=16, patch_size=8
    )
    config.save_pretrained(tmp_path / "empty")
    with pytest.raises(CheckpointError, match=r"empty: an HF folder needs model\.safetensors"):
        vitlab.load(tmp_path / "empty")
    config.hidden_act = "relu"
    transformers.ViTModel(config).save_pretrained(tmp_path / "relu")
    with pytest.raises(CheckpointError, match="hidden_act 'relu'"):
        vitlab.load(tmp_path / "relu")
