"""Reading and writing checkpoints: vitlab's own folder, official vit_jax .npz, timm, HF, torchvision."""

from .errors import CheckpointError
from .folder import save_pretrained
from .load import load
from .npz import export_npz

__all__ = ["CheckpointError", "export_npz", "load", "save_pretrained"]
