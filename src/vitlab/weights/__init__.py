"""Reading and writing checkpoints: vitlab's own folder, official vit_jax .npz, timm, HF, torchvision;
the pretrained-weights catalogue and Hub repositories."""

from vitlab.errors import CheckpointError

from .catalogue import CatalogueError, list_pretrained
from .folder import save_pretrained
from .load import load
from .npz import export_npz
from .pretrained import create_model, load_pretrained
from .push import push_model  # also gives models their push_to_hub method

__all__ = [
    "CatalogueError",
    "CheckpointError",
    "create_model",
    "export_npz",
    "list_pretrained",
    "load",
    "load_pretrained",
    "push_model",
    "save_pretrained",
]
