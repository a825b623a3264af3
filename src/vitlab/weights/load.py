"""vitlab.load(source, **overrides): read any supported checkpoint, detecting its format.

a local file or folder                       -> local.py (vitlab, HF, vit_jax .npz, timm, torchvision)
"MODEL:TAG", e.g. "B/16:augreg-in21k"        -> the pretrained-weights catalogue (pretrained.py)
"hf://org/name[@revision]"                   -> a Hugging Face Hub repository (hub.py)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitlab.model import BiTResNet, VisionTransformer

from .catalogue import is_catalogue_name
from .hub import PREFIX, load_hub
from .local import load_file
from .pretrained import load_pretrained


def load(source: str | Path, **overrides: Any) -> VisionTransformer | BiTResNet:
    """Load a checkpoint as a VisionTransformer (in eval mode): a file, a folder, a catalogue name
    or a Hub repository. Overrides as in `load_file`."""
    if isinstance(source, str) and source.startswith(PREFIX):
        return load_hub(source, **overrides)
    if is_catalogue_name(source) and not Path(source).exists():
        return load_pretrained(str(source), **overrides)
    return load_file(source, **overrides)


__all__ = ["load", "load_file"]
