"""The training pipeline with decoding on the training device (data.decode_device="cuda").

The loader's workers only read each file's bytes and header and draw the sample's random crop and
flip, under the sample's seed (training/loader.py) and with the same draws as the CPU pipeline's
v2.RandomResizedCrop and v2.RandomHorizontalFlip, so a sample gets the same crop either way. The
batch moves to the GPU as an EncodedBatch: its `.to(device)` decodes the JPEGs there in one call
(torchvision.io.decode_jpeg, nvJPEG on CUDA), applies each file's EXIF orientation, crops, resizes
(antialiased bicubic, as PIL's), flips, applies the RandAugment operations drawn for it
(tensor_randaugment.py) and normalises, and returns the (B, 3, H, W) float batch the trainer expects.
Files that are not JPEG, and JPEGs the device's decoder refuses, are decoded on the CPU by read_image,
as the CPU pipeline decodes them. A JPEG that passes the header check and still cannot be decoded stops
the run, naming the file, where the CPU pipeline would skip it (a dataset's check when it is loaded,
which decodes splits of up to 50,000 images, finds such files first).

Random erasing's box and noise are drawn in the worker too (v2.RandomErasing's draws) and pasted into
the normalised batch. The Keras rotation and zoom are not ported: a run that asks for them with device
decoding is refused (`unsupported_augmentation`). `device="cpu"` runs the same code on the CPU, which is how it is tested
without a GPU. (torchvision 0.29 marks its decoders deprecated in favour of TorchCodec, which vitlab does
not depend on; they work as before.)
"""

from __future__ import annotations

import contextlib
import io
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image
from torchvision.io import ImageReadMode, decode_jpeg
from torchvision.transforms import InterpolationMode, v2
from torchvision.transforms.v2 import functional as F

from .datasets import EncodedImages
from .images import BadImageError, check_size, read_image
from .randaugment import FILL, RandAugment
from .tensor_randaugment import apply_operations
from .transforms import random_erasing, size_pair

JPEG_MAGIC = b"\xff\xd8"
EXIF_ORIENTATION = 0x0112


@dataclass(frozen=True)
class EncodedSample:
    """One file's bytes and the crop (top, left, height, width, in the oriented image) and flip drawn for it."""

    data: torch.Tensor  # uint8 (N,), the encoded file
    name: str  # the file, for errors
    orientation: int  # EXIF orientation 1-8 (1: as stored)
    box: tuple[int, int, int, int]
    flip: bool
    operations: tuple[tuple[str, Any], ...] = ()  # RandAugment's, as RandAugment.draw gave them
    erase: tuple[int, int, torch.Tensor] | None = None  # random erasing's top, left and noise (C, h, w)


def device_transform(image_size: int | tuple[int, int], preprocessing: Any, augment: Any) -> DrawCrop:
    """The training transform of the device pipeline (in place of transforms.train_transform)."""
    pipeline = DevicePipeline(size_pair(image_size), preprocessing.mean, preprocessing.std, preprocessing.interpolation)
    randaugment = None
    if augment.randaugment is not None:
        num_ops, magnitude = augment.randaugment
        randaugment = RandAugment(num_ops, magnitude)  # draws only; its fill and interpolation are the pipeline's
    erasing = random_erasing(augment.reprob) if augment.reprob else None
    return DrawCrop(augment.crop_scale, augment.crop_ratio, augment.hflip, pipeline, randaugment, erasing)


def unsupported_augmentation(augment: Any) -> str | None:
    """The first augmentation field the device pipeline does not run, or None."""
    for name in ("rotation", "zoom"):
        if getattr(augment, name):
            return name
    return None


class DrawCrop:
    """In the worker: header -> the sample's crop, flip and RandAugment operations, drawn as
    v2.RandomResizedCrop, v2.RandomHorizontalFlip and RandAugment draw them (the same generator calls,
    in the same order)."""

    def __init__(
        self,
        scale: tuple[float, float],
        ratio: tuple[float, float],
        hflip: bool,
        pipeline: DevicePipeline,
        randaugment: RandAugment | None = None,
        erasing: v2.RandomErasing | None = None,
    ) -> None:
        self.crop = v2.RandomResizedCrop(1, scale=scale, ratio=ratio)  # only its make_params is used
        self.hflip, self.pipeline, self.randaugment, self.erasing = hflip, pipeline, randaugment, erasing

    def draw_erasing(self) -> tuple[int, int, torch.Tensor] | None:
        """v2.RandomErasing's draws for the (3, H, W) output: applied unless rand >= p; its box and noise."""
        if self.erasing is None or torch.rand(1) >= self.erasing.p:
            return None
        height, width = self.pipeline.size
        params = self.erasing.make_params([torch.empty(1, 1, 1).expand(3, height, width)])
        return None if params["v"] is None else (params["i"], params["j"], params["v"])

    def __call__(self, header: Any) -> EncodedSample:  # read_header's (bytes, width, height, orientation, name)
        data, width, height, orientation, name = header
        shape_only = torch.empty(1, 1, 1).expand(3, height, width)  # what make_params reads: the size
        params = self.crop.make_params([shape_only])
        flip = self.hflip and bool(torch.rand(1) < 0.5)  # v2's RandomHorizontalFlip: flips unless rand >= p
        box = (params["top"], params["left"], params["height"], params["width"])
        operations = tuple(self.randaugment.draw()) if self.randaugment is not None else ()
        tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return EncodedSample(tensor, name, orientation, box, flip, operations, self.draw_erasing())


def read_header(data: bytes, name: str) -> tuple[bytes, int, int, int, str]:
    """(bytes, width, height after the EXIF orientation, orientation, name); BadImageError as read_image."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            check_size(image.width, image.height, name, len(data))
            orientation = int(image.getexif().get(EXIF_ORIENTATION, 1))
            width, height = image.size
    except BadImageError:
        raise
    except Exception as error:
        raise BadImageError(name, str(error) or type(error).__name__) from None
    orientation = orientation if 1 <= orientation <= 8 else 1
    if orientation >= 5:  # turned by 90 degrees: width and height swap
        width, height = height, width
    return data, width, height, orientation, name


class DeviceDecodedImages(torch.utils.data.Dataset):
    """`dataset`'s images as EncodedSamples (bytes, crop, flip), unreadable files skipped as EncodedImages
    skips them; the dataset's transform is the DrawCrop (`device_transform`)."""

    def __init__(self, dataset: EncodedImages) -> None:
        assert isinstance(dataset.transform, DrawCrop), dataset.transform
        self.dataset: EncodedImages = dataset
        self.draw: DrawCrop = dataset.transform

    def collate(self) -> CollateEncoded:
        return CollateEncoded(self.draw.pipeline)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[EncodedSample, int]:
        dataset = self.dataset
        return dataset.first_readable(
            index, lambda source: read_header(dataset.encoded(source), str(source)), self.draw
        )


def orient(image: torch.Tensor, orientation: int) -> torch.Tensor:
    """(C, H, W) as stored -> as shown: EXIF orientation 2-8, as PIL's ImageOps.exif_transpose."""
    if orientation == 2:
        return image.flip(-1)
    if orientation == 3:
        return image.flip(-1, -2)
    if orientation == 4:
        return image.flip(-2)
    if orientation == 5:
        return image.transpose(-1, -2)
    if orientation == 6:
        return torch.rot90(image, -1, (-2, -1))
    if orientation == 7:
        return image.transpose(-1, -2).flip(-1, -2)
    if orientation == 8:
        return torch.rot90(image, 1, (-2, -1))
    return image


def _decode_on_cpu(sample: EncodedSample, device: torch.device) -> torch.Tensor:
    """A file that is not a JPEG, or a JPEG the device's decoder refuses (some CMYK ones): decoded by
    read_image, as the CPU pipeline decodes it (EXIF orientation applied, transparency on white), or
    BadImageError naming it."""
    pixels = np.array(read_image(bytes(sample.data.numpy()), name=sample.name))  # (H, W, 3) uint8, shown
    return torch.from_numpy(pixels).permute(2, 0, 1).contiguous().to(device)


def _decode_jpeg_or_none(sample: EncodedSample, device: torch.device) -> torch.Tensor | None:
    try:
        return decode_jpeg(sample.data, mode=ImageReadMode.RGB, device=device)
    except RuntimeError:
        return None


@dataclass
class DevicePipeline:
    """What EncodedBatch.to does after decoding: the crop's output size and the normalisation."""

    size: tuple[int, int]
    mean: Sequence[float]
    std: Sequence[float]
    interpolation: str = "bicubic"

    def decode(self, samples: Sequence[EncodedSample], device: torch.device) -> list[torch.Tensor]:
        """uint8 (3, H, W) per sample on `device`: the JPEGs in one decode_jpeg call, the rest on the CPU."""
        jpegs = [i for i, s in enumerate(samples) if bytes(s.data[:2].tolist()) == JPEG_MAGIC]
        images: list[torch.Tensor | None] = [None] * len(samples)
        try:
            decoded = (
                decode_jpeg([samples[i].data for i in jpegs], mode=ImageReadMode.RGB, device=device) if jpegs else []
            )
        except RuntimeError:  # one file of the batch cannot: each alone, the refused ones on the CPU
            decoded = [_decode_jpeg_or_none(samples[i], device) for i in jpegs]
        for i, image in zip(jpegs, decoded):
            images[i] = None if image is None else orient(image, samples[i].orientation)
        return [_decode_on_cpu(s, device) if image is None else image for image, s in zip(images, samples)]

    def __call__(self, samples: Sequence[EncodedSample], device: torch.device) -> torch.Tensor:
        mode = InterpolationMode(self.interpolation)
        crops = []
        for image, sample in zip(self.decode(samples, device), samples):
            top, left, height, width = sample.box
            crop = F.resized_crop(image, top, left, height, width, list(self.size), interpolation=mode, antialias=True)
            crop = crop.flip(-1) if sample.flip else crop
            crops.append(apply_operations(crop, sample.operations, self.interpolation, FILL))
        batch = torch.stack(crops).to(torch.float32).mul_(1.0 / 255)  # ToNormalized's arithmetic, on the batch
        mean = torch.tensor([float(m) for m in self.mean], device=batch.device).view(1, -1, 1, 1)
        std = torch.tensor([float(s) for s in self.std], device=batch.device).view(1, -1, 1, 1)
        batch.sub_(mean).div_(std)
        for index, sample in enumerate(samples):  # random erasing, on the normalised image as timm places it
            if sample.erase is not None:
                top, left, noise = sample.erase
                batch[index, :, top : top + noise.shape[1], left : left + noise.shape[2]] = noise.to(batch.device)
        return batch


class EncodedBatch:
    """A batch of EncodedSamples from the loader; `.to(device)` is the decoded, augmented (B, 3, H, W) batch.

    It crosses from a loader worker packed: every file's bytes in one uint8 tensor with their offsets,
    every erasing's noise in one float tensor, the rest plain values. A worker hands each tensor over
    as a file descriptor, and a tensor per file (256 to a batch, a few batches ahead per worker) ran a
    process past the usual limit of 1024 open files."""

    def __init__(self, samples: Sequence[EncodedSample], pipeline: DevicePipeline) -> None:
        self.pipeline = pipeline
        self.data = torch.cat([sample.data for sample in samples]) if samples else torch.empty(0, dtype=torch.uint8)
        self.offsets = [0]
        for sample in samples:
            self.offsets.append(self.offsets[-1] + sample.data.numel())
        self.details = [(s.name, s.orientation, s.box, s.flip, s.operations) for s in samples]
        erased = [s.erase for s in samples]
        self.boxes = [None if e is None else (e[0], e[1], tuple(e[2].shape)) for e in erased]
        noise = [e[2].flatten() for e in erased if e is not None]
        self.noise = torch.cat(noise) if noise else None

    @property
    def samples(self) -> list[EncodedSample]:
        """The batch's samples again, as views of its packed tensors."""
        samples, start = [], 0
        for index, (name, orientation, box, flip, operations) in enumerate(self.details):
            erase, where = None, self.boxes[index]
            if where is not None and self.noise is not None:
                top, left, shape = where
                size = shape[0] * shape[1] * shape[2]
                erase, start = (top, left, self.noise[start : start + size].view(shape)), start + size
            data = self.data[self.offsets[index] : self.offsets[index + 1]]
            samples.append(EncodedSample(data, name, orientation, box, flip, operations, erase))
        return samples

    def __len__(self) -> int:
        return len(self.details)

    def pin_memory(self) -> EncodedBatch:  # the DataLoader's pin_memory thread calls this; bytes stay as they are
        return self

    def to(self, device: torch.device | str, non_blocking: bool = False) -> torch.Tensor:
        return self.pipeline(self.samples, torch.device(device))


class CollateEncoded:
    """The DataLoader's collate_fn: [(EncodedSample, label)] -> (EncodedBatch, labels (B,))."""

    def __init__(self, pipeline: DevicePipeline) -> None:
        self.pipeline = pipeline

    def __call__(self, items: list[tuple[EncodedSample, int]]) -> tuple[EncodedBatch, torch.Tensor]:
        return EncodedBatch([s for s, _ in items], self.pipeline), torch.tensor([label for _, label in items])


class DecodedAhead:
    """(images, labels) on `device` from an iterator of (EncodedBatch, labels): a thread decodes the
    next batch, on a CUDA stream of its own, while the current one trains (one batch ahead), so that
    decoding neither waits for the step nor makes the step wait. `close` ends the thread."""

    _END = object()

    def __init__(self, batches: Iterator[tuple[EncodedBatch, torch.Tensor]], device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.ready: queue.Queue = queue.Queue()
        self.free = threading.Semaphore(1)  # decoded batches the consumer has not taken yet, at most one
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._decode, args=(batches,), name="vitlab-decode", daemon=True)
        self.thread.start()

    def _decode(self, batches: Iterator[tuple[EncodedBatch, torch.Tensor]]) -> None:
        context = torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()
        try:
            with context:
                for encoded, labels in batches:
                    while not self.free.acquire(timeout=0.1):
                        if self.closing.is_set():
                            return
                    if self.closing.is_set():
                        return
                    images, labels = encoded.to(self.device), labels.to(self.device, non_blocking=True)
                    done = self.stream.record_event() if self.stream is not None else None
                    self.ready.put((images, labels, done))
            self.ready.put(self._END)
        except BaseException as error:  # a file the decoder cannot read: raised in the training thread
            self.ready.put(error)

    def __iter__(self) -> DecodedAhead:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        item = self.ready.get()
        if item is self._END:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        images, labels, done = item
        self.free.release()
        if done is not None:  # the training stream waits for the decode, and the memory stays until it is used
            current = torch.cuda.current_stream(self.device)
            current.wait_event(done)
            images.record_stream(current)
            labels.record_stream(current)
        return images, labels

    def close(self) -> None:
        self.closing.set()
        self.thread.join()


@contextlib.contextmanager
def device_batches(loader: Iterable[Any], device: torch.device) -> Iterator[Iterator[Any]]:
    """An iterator over the loader's batches: decoded ahead on `device` (DecodedAhead) when the loader
    collates EncodedBatches, as they come otherwise; the decoding thread ends with the block."""
    batches = iter(loader)
    if not isinstance(getattr(loader, "collate_fn", None), CollateEncoded):
        yield batches
        return
    ahead = DecodedAhead(batches, device)
    try:
        yield ahead
    finally:
        ahead.close()
