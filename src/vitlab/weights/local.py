"""A local checkpoint file or folder as a model, its format told from the file:

    folder with config.json "format": "vitlab"   -> vitlab's own (folder.py)
    folder with config.json "model_type": "vit"  -> Hugging Face transformers ViT (hf.py)
    folder with config.json "model_type": "bit"  -> transformers' BiT as a BiTResNet (hf_bit.py)
    folder with config.json "architecture"       -> a timm model folder (timm_folder.py), read as its file
    *.npz                                        -> official vit_jax / AugReg / big_vision (npz.py)
    *.safetensors, *.pth, *.pt, *.bin, *.pth.tar -> timm or torchvision state dict, told apart by key names
                                                    (timm ResNetV2 / BiT as a BiTResNet: bit.py); a timm
                                                    train.py checkpoint with the architecture it records

The catalogue (pretrained.py) and the Hub (hub.py) end by reading a downloaded file with `load_file`;
`vitlab.load` (load.py) dispatches to the three.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitlab.errors import CheckpointError
from vitlab.model import BiTConfig, BiTResNet, VisionTransformer, ViTConfig
from vitlab.textfiles import TextFileError, read_json

from .bit import convert_timm_resnetv2, is_timm_resnetv2_state_dict
from .build import build_model
from .files import read_checkpoint
from .folder import CONFIG_FILE, is_vitlab_folder, load_folder
from .hf import is_hf_vit_folder, load_hf
from .hf_bit import is_hf_bit_folder, load_hf_bit
from .hybrid import is_hybrid_npz, load_hybrid_npz, with_timm_backbone
from .npz import load_npz
from .timm import TimmRecord, convert_timm, is_timm_state_dict
from .timm_folder import timm_document, timm_record, timm_weights, training_checkpoint_record
from .torchvision import convert_torchvision, is_torchvision_state_dict


def load_file(source: str | Path, **overrides: Any) -> VisionTransformer | BiTResNet:
    """Load a local checkpoint file or folder as a VisionTransformer (in eval mode).

    Overrides: any ViTConfig field the weights do not decide (dropout, drop_path, act, norm_eps,
    pos_resample, preprocessing, ...); `image_size` resamples E_pos to a new resolution;
    `num_classes` (with `class_names`) resets the head for fine-tuning; `num_heads` for timm and
    torchvision files, which do not record it (default: the architecture of their shapes);
    `pretrained_tag` for timm ("vit_base_patch16_224.augreg_in21k") and torchvision
    ("ViT_B_16_Weights.IMAGENET1K_V1") files: the weights' own preprocessing, from their library.
    """
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    if "pretrained_tag" in overrides and (path.suffix == ".npz" or (path.is_dir() and timm_document(path) is None)):
        raise CheckpointError(
            f"{path}: pretrained_tag= names timm or torchvision weights; this checkpoint records its own preprocessing"
        )
    if path.is_dir():
        if is_vitlab_folder(path):
            return load_folder(path, **overrides)
        if is_hf_vit_folder(path):
            return load_hf(path, **overrides)
        if is_hf_bit_folder(path):
            return load_hf_bit(path, **overrides)
        if (document := timm_document(path)) is not None:
            record = timm_record(document, str(path))
            return load_state_dict_file(timm_weights(path), overrides, record, str(path))
        try:  # a config.json that cannot be read says why
            read_json(path / CONFIG_FILE)
        except FileNotFoundError:
            pass
        except TextFileError as error:
            raise CheckpointError(str(error)) from None
        raise CheckpointError(
            f"{path}: unknown checkpoint format (a folder needs a {CONFIG_FILE} of vitlab, of an HF ViT or BiT, or of timm)"
        )
    if path.suffix == ".npz":
        return load_hybrid_npz(path, **overrides) if is_hybrid_npz(path) else load_npz(path, **overrides)
    return load_state_dict_file(path, overrides)


def load_state_dict_file(
    path: Path, overrides: dict[str, Any], record: TimmRecord | None = None, source_name: str | None = None
) -> VisionTransformer | BiTResNet:
    """A state-dict file as a model, its library told from the key names; `record` is what a timm
    folder's config.json says of it (else what a timm train.py checkpoint records)."""
    overrides = dict(overrides)
    state, training = read_checkpoint(path)
    source_name = source_name or str(path)
    record = record or training_checkpoint_record(training, source_name)
    config: ViTConfig | BiTConfig
    if is_timm_state_dict(state):
        config, state = convert_timm(state, source_name, overrides, record)
        config, state = with_timm_backbone(config, state, source_name)  # hybrids: vit_*_r50_s16_*
    elif is_torchvision_state_dict(state):
        config, state = convert_torchvision(state, source_name, overrides)
    elif is_timm_resnetv2_state_dict(state):
        config, state = convert_timm_resnetv2(state, source_name, overrides, record)
    elif "pos_embed.weight" in state:
        raise CheckpointError(f"{path}: vitlab weights without their config; load the folder save_pretrained wrote")
    else:
        keys = ", ".join(sorted(state)[:6])
        raise CheckpointError(
            f"{path}: unknown checkpoint format: neither timm nor torchvision ViT keys nor timm ResNetV2 ones ({keys}, ...)"
        )
    return build_model(config, state, source_name, overrides)
