"""CIFAR-10 / CIFAR-100 from the python-pickle release, as distributed by Krizhevsky.

cifar-10-batches-py/: data_batch_1..5, test_batch, batches.meta (label_names)
cifar-100-python/:    train, test, meta (fine_label_names); the 100 fine labels are the classes
Each batch is a pickled dict: "data" uint8 (N, 3072), rows of 1024 red, 1024 green, 1024 blue
values of a 32 x 32 image, and "labels" (CIFAR-10) or "fine_labels" (CIFAR-100). The test set is
the validation split. The official files were pickled by Python 2 (str keys once read as latin-1);
files re-pickled by Python 3 may hold bytes keys (b"data") and bytes class names, read alike.

vitlab reads the pickles itself rather than through torchvision.datasets.CIFAR10/100: those check
the md5 of the official files (so no small test files) and unpickle without restriction. Here the
unpickler only builds dicts, lists, strings and numpy arrays of numbers, each array from bytes of
the file whose length matches its declared shape; a file asking for anything else is refused
without running it. `download=True` fetches the release with torchvision, md5-checked.
"""

from __future__ import annotations

import codecs
import io
import math
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vitlab.bounded_read import read_bounded

from .datasets import ArrayImages, Transform
from .splits import DataSplits


@dataclass(frozen=True)
class CifarLayout:
    folder: str
    train: tuple[str, ...]
    test: str
    meta: str
    label_key: str
    names_key: str


LAYOUTS = {
    "cifar10": CifarLayout(
        "cifar-10-batches-py",
        tuple(f"data_batch_{i}" for i in range(1, 6)),
        "test_batch",
        "batches.meta",
        "labels",
        "label_names",
    ),
    "cifar100": CifarLayout("cifar-100-python", ("train",), "test", "meta", "fine_labels", "fine_label_names"),
}

# The official batches are 31 MB (CIFAR-10) and 155 MB (CIFAR-100's train); a file above this is refused unread.
MAX_CIFAR_FILE_BYTES = 256 * 2**20


class _Array:
    """What numpy's `_reconstruct(ndarray, (0,), b"b")` stands for in a pickle: an empty array that the
    pickle's BUILD then fills with (version, shape, dtype, fortran order, raw bytes)."""

    array: np.ndarray | None = None

    def __setstate__(self, state: tuple) -> None:
        if not isinstance(state, tuple) or len(state) != 5:
            raise pickle.UnpicklingError(f"an array state of {type(state).__name__} {len(state)}; expected 5 fields")
        _, shape, dtype, fortran_order, raw = state
        self.array = _checked_array(raw, dtype, shape, bool(fortran_order))


class _NDArrayClass:
    """`numpy.ndarray` as a pickle names it: only ever the first argument of `_reconstruct`. Called, it
    would allocate whatever shape the pickle gives it, so a call is refused."""

    def __call__(self, *args: object) -> None:
        raise pickle.UnpicklingError(f"refusing to call numpy.ndarray{args!r:.60}, which allocates what it is asked")


def _reconstruct(cls: object, shape: tuple, typecode: bytes) -> _Array:
    if not isinstance(cls, _NDArrayClass) or tuple(shape) != (0,):
        raise pickle.UnpicklingError(f"numpy _reconstruct({type(cls).__name__}, {shape!r}): not how an array pickles")
    return _Array()


def _frombuffer(buffer: bytes, dtype: np.dtype, shape: tuple, order: str) -> np.ndarray:
    return _checked_array(buffer, dtype, shape, order == "F")


def _dtype(code: str, align: bool = False, copy: bool = True) -> np.dtype:
    if not isinstance(code, str) or len(code) > 4:
        raise pickle.UnpicklingError(f"numpy dtype {code!r}: not a plain number type")
    return np.dtype(code, align=bool(align), copy=True)  # a copy: the pickle's BUILD then sets its state


def _checked_array(raw: object, dtype: object, shape: object, fortran_order: bool) -> np.ndarray:
    """The array that `raw` holds, once the shape and dtype its pickle declares are found to take
    exactly its bytes: numbers only, and nothing allocated beyond what the file held."""
    if not isinstance(dtype, np.dtype) or dtype.kind not in "biuf" or dtype.fields or dtype.subdtype:
        raise pickle.UnpicklingError(f"an array of dtype {dtype!r}; a CIFAR batch holds numbers only")
    if not isinstance(raw, (bytes, bytearray)) or not isinstance(shape, tuple):
        raise pickle.UnpicklingError(f"an array of {type(raw).__name__} data and shape {shape!r}")
    if not all(isinstance(side, int) and side >= 0 for side in shape):
        raise pickle.UnpicklingError(f"an array of shape {shape!r}")
    declared = math.prod(shape) * dtype.itemsize
    if declared != len(raw):
        raise pickle.UnpicklingError(
            f"an array declared {dtype} {shape} ({declared:,} bytes) with {len(raw):,} bytes of data"
        )
    return np.frombuffer(raw, dtype=dtype).reshape(shape, order="F" if fortran_order else "C")


# What a CIFAR pickle may name, each mapped to a stand-in above that checks its arguments (numpy's own
# functions would allocate whatever shape a pickle declares), and the codec protocol 2 uses for bytes.
_ALLOWED_GLOBALS: dict[tuple[str, str], object] = {
    ("_codecs", "encode"): codecs.encode,
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("numpy", "ndarray"): _NDArrayClass(),
    ("numpy", "dtype"): _dtype,
}


class _CifarUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return _ALLOWED_GLOBALS[module, name]


def _arrays(value):
    """The content with each stand-in replaced by the array it built."""
    if isinstance(value, _Array):
        if value.array is None:
            raise pickle.UnpicklingError("an array whose data never came")
        return value.array
    if isinstance(value, dict):
        return {key: _arrays(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_arrays(item) for item in value]
    return value


def read_pickle(path: Path) -> dict:
    if not path.exists():
        raise FileNotFoundError(f"CIFAR file {str(path)!r} is missing")
    try:
        data = read_bounded(path, MAX_CIFAR_FILE_BYTES, "a CIFAR batch")
        # latin1 turns the Python 2 byte strings of the official files into str keys.
        content = _arrays(_CifarUnpickler(io.BytesIO(data), encoding="latin1").load())
    except Exception as error:  # pickle raises many kinds on a damaged file
        raise ValueError(f"CIFAR file {str(path)!r} cannot be read: {error}") from None
    if not isinstance(content, dict):
        raise ValueError(f"CIFAR file {str(path)!r} holds a {type(content).__name__}, not a dict")
    return {_text(key): value for key, value in content.items()}


def _text(value):
    """b"data" -> "data": Python 3 keeps the byte strings that Python 2 pickled as str."""
    return value.decode("latin1") if isinstance(value, bytes) else value


def read_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    """Images (N, 32, 32, 3) uint8 and labels (N,) of one batch file."""
    batch = read_pickle(path)
    missing = [key for key in ("data", label_key) if key not in batch]
    if missing:
        raise ValueError(f"CIFAR file {str(path)!r} has no {missing[0]!r} entry")
    data = np.asarray(batch["data"])
    labels = np.asarray(batch[label_key], dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(data) != len(labels):
        raise ValueError(
            f"CIFAR file {str(path)!r} has data {data.dtype} {data.shape} for {len(labels)} "
            f"labels; expected uint8 (N, 3072)"
        )
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels  # planes -> (N, H, W, C)


def find_cifar_folder(path: Path) -> tuple[str, Path] | None:
    """(kind, batch folder) when `path` is a CIFAR batch folder or holds one."""
    for kind, layout in LAYOUTS.items():
        if (path / layout.meta).is_file() and (path / layout.test).is_file():
            return kind, path
        if (path / layout.folder).is_dir():
            return kind, path / layout.folder
    return None


def load_cifar_splits(
    kind: str, location: str, train_transform: Transform, eval_transform: Transform, *, download: bool = False
) -> DataSplits:
    layout = LAYOUTS[kind]
    root = Path(location).expanduser() if location else Path(".")
    if download:
        from torchvision import datasets

        try:
            (datasets.CIFAR10 if kind == "cifar10" else datasets.CIFAR100)(str(root), download=True)
        except (OSError, RuntimeError) as error:  # offline: URLError; a damaged archive: RuntimeError
            reason = getattr(error, "reason", None) or error
            raise ValueError(
                f"--download: cannot fetch {kind} into {str(root)!r} ({reason}); copy the "
                f"{layout.folder} folder there instead"
            ) from None
    folder = root if (root / layout.meta).is_file() else root / layout.folder
    if not folder.is_dir():
        raise FileNotFoundError(
            f"no {kind} python folder ({layout.folder}) in {str(root)!r}; pass --download to fetch it"
        )
    train = [read_batch(folder / name, layout.label_key) for name in layout.train]
    test_images, test_labels = read_batch(folder / layout.test, layout.label_key)
    class_names = [str(_text(name)) for name in read_pickle(folder / layout.meta).get(layout.names_key, [])]
    labels = np.concatenate([labels for _, labels in train + [(None, test_labels)]])
    if not class_names or labels.min() < 0 or labels.max() >= len(class_names):
        raise ValueError(
            f"CIFAR meta file {str(folder / layout.meta)!r} lists {len(class_names)} "
            f"class names for labels {labels.min()}..{labels.max()}"
        )
    # Keys name each image by batch file and row, so that datasets drawn from one copy compare.
    train_keys = [
        f"{name}:{row}" for name, (_, batch_labels) in zip(layout.train, train) for row in range(len(batch_labels))
    ]
    return DataSplits(
        train=ArrayImages(
            np.concatenate([images for images, _ in train]),
            np.concatenate([labels for _, labels in train]),
            train_transform,
            train_keys,
        ),
        val=ArrayImages(
            np.ascontiguousarray(test_images),
            test_labels,
            eval_transform,
            [f"{layout.test}:{row}" for row in range(len(test_labels))],
        ),
        class_names=class_names,
    )
