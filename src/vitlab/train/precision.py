"""Moved to vitlab.model.runtime (the device and numerics a model runs in, for training and inference alike)."""

from vitlab.model.runtime import DTYPES, Precision, resolve_device, resolve_precision

__all__ = ["DTYPES", "Precision", "resolve_device", "resolve_precision"]
