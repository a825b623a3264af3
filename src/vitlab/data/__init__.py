"""Data sources (digits, ImageFolder, CIFAR, WebDataset, Hugging Face datasets, Dataset objects) and
transforms; knows nothing of models."""

from .datasets import TooManyBadImagesError
from .images import BadImageError, read_image
from .sources import load_datasets, parse_source
from .splits import DataSplits, SplitPlan, hold_out, take_fraction
from .transforms import build_transforms

__all__ = [
    "BadImageError",
    "DataSplits",
    "SplitPlan",
    "TooManyBadImagesError",
    "build_transforms",
    "hold_out",
    "load_datasets",
    "parse_source",
    "read_image",
    "take_fraction",
]
