"""A local checkpoint file or folder as a model, its format told from the file:

    folder with config.json "format": "vitlab"   -> vitlab's own (folder.py)
    folder with config.json "model_type": "vit"  -> Hugging Face transformers ViT (hf.py)
    *.npz                                        -> official vit_jax / AugReg / big_vision (npz.py)
    *.safetensors, *.pth, *.pt, *.bin            -> timm or torchvision state dict, told apart by key names
                                                    (timm ResNetV2 / BiT as a BiTResNet: bit.py)

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
from .files import read_state_dict
from .folder import CONFIG_FILE, is_vitlab_folder, load_folder
from .hf import is_hf_vit_folder, load_hf
from .hybrid import is_hybrid_npz, load_hybrid_npz, with_timm_backbone
from .npz import load_npz
from .timm import convert_timm, is_timm_state_dict
from .torchvision import convert_torchvision, is_torchvision_state_dict


def load_file(source: str | Path, **overrides: Any) -> VisionTransformer | BiTResNet:
    """Load a local checkpoint file or folder as a VisionTransformer (in eval mode).

    Overrides: any ViTConfig field the weights do not decide (dropout, drop_path, act, norm_eps,
    pos_resample, preprocessing, ...); `image_size` resamples E_pos to a new resolution;
    `num_classes` (with `class_names`) resets the head for fine-tuning; `num_heads` for timm and
    torchvision files, which do not record it (default: width / 64, 80-wide heads for H).
    """
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    if path.is_dir():
        if is_vitlab_folder(path):
            return load_folder(path, **overrides)
        if is_hf_vit_folder(path):
            return load_hf(path, **overrides)
        try:  # a config.json that cannot be read says why
            read_json(path / CONFIG_FILE)
        except FileNotFoundError:
            pass
        except TextFileError as error:
            raise CheckpointError(str(error)) from None
        raise CheckpointError(
            f"{path}: unknown checkpoint format (a folder needs a {CONFIG_FILE} of vitlab or of an HF ViT)"
        )
    if path.suffix == ".npz":
        return load_hybrid_npz(path, **overrides) if is_hybrid_npz(path) else load_npz(path, **overrides)
    state = read_state_dict(path)
    source_name = str(path)
    config: ViTConfig | BiTConfig
    if is_timm_state_dict(state):
        config, state = convert_timm(state, source_name, overrides)
        config, state = with_timm_backbone(config, state, source_name)  # hybrids: vit_*_r50_s16_*
    elif is_torchvision_state_dict(state):
        config, state = convert_torchvision(state, source_name, overrides)
    elif is_timm_resnetv2_state_dict(state):
        config, state = convert_timm_resnetv2(state, source_name, overrides)
    elif "pos_embed.weight" in state:
        raise CheckpointError(f"{path}: vitlab weights without their config; load the folder save_pretrained wrote")
    else:
        keys = ", ".join(sorted(state)[:6])
        raise CheckpointError(
            f"{path}: unknown checkpoint format: neither timm nor torchvision ViT keys nor timm ResNetV2 ones ({keys}, ...)"
        )
    return build_model(config, state, source_name, overrides)
