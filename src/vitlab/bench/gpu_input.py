"""The device input pipeline (data/device_decode.py) against the CPU one: outputs compared, and timed.

Both pipelines get the same samples under the same seeds, so the same crops, flips and RandAugment
operations; what differs is the decoder (nvJPEG on a GPU against libjpeg-turbo through PIL: each
rounds its inverse DCT and upsamples chroma its own way), the resize (torch's antialiased bicubic
against PIL's: the same kernel, a = -0.5, rounded differently) and RandAugment's geometric operations
(grid_sample's bicubic, a = -0.75, against PIL's a = -0.5). None shifts a picture, so the differences
are a level or two of 255 on most values; a few grow where an operation amplifies them (Equalize,
Posterize, Solarize thresholds) or along sharp edges of the chroma planes. TOLERANCE states what the
comparison accepts, in levels of 255 (before normalisation), when the device pipeline decodes with the
CPU's decoder (libjpeg-turbo on both sides: about 0.2 levels on average). A GPU's decoder is another
decoder, whose chroma upsampling and rounding are its own: GPU_DECODER_TOLERANCE allows it twice the
mean and three times the outliers, a figure stated before any GPU was measured against it, and the
output says so until a measured run replaces it.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from vitlab.data.datasets import EncodedImages
from vitlab.data.device_decode import DeviceDecodedImages, device_transform
from vitlab.data.transforms import train_transform
from vitlab.model.config import Preprocessing
from vitlab.training.config import AugmentSpec
from vitlab.training.loader import train_loader

from .machine import synchronize

# Mean |difference| over all values, and the share of values more than OUTLIER levels apart.
TOLERANCE = {"mean_levels": 2.0, "outlier_levels": 16.0, "outlier_fraction": 0.01}
GPU_DECODER_TOLERANCE = {"mean_levels": 4.0, "outlier_levels": 16.0, "outlier_fraction": 0.03, "measured": False}


def tolerance_for(device: torch.device) -> dict:
    """The comparison's tolerance: the CPU decoders', or, where the GPU decodes, the GPU decoder's."""
    return GPU_DECODER_TOLERANCE if device.type == "cuda" else TOLERANCE


AUGMENT = AugmentSpec(crop_scale=(0.35, 1.0), hflip=True, randaugment=(2, 10))  # small-data's, without mixing


def _datasets(files: list[str], image_size: int) -> tuple[EncodedImages, DeviceDecodedImages]:
    preprocessing, size = Preprocessing(), (image_size, image_size)
    labels = [0] * len(files)
    cpu = EncodedImages(files, labels, train_transform(size, preprocessing, AUGMENT))
    device = EncodedImages(files, labels, device_transform(size, preprocessing, AUGMENT))
    return cpu, DeviceDecodedImages(device)


def compare_pipelines(files: list[str], image_size: int, device: torch.device, seed: int = 0) -> dict:
    """The CPU pipeline's batch against the device pipeline's, of the same samples, in levels of 255."""
    cpu, on_device = _datasets(files, image_size)
    expected, _ = next(iter(train_loader(cpu, len(files), seed, 0, False)))
    batch, _ = next(iter(train_loader(on_device, len(files), seed, 0, False, collate=on_device.collate())))
    got = batch.to(device).cpu()
    levels = (got - expected).abs() * 0.5 * 255  # the default std 0.5 undone
    tolerance = tolerance_for(device)
    result = {
        "images": len(files),
        "mean_levels": levels.mean().item(),
        "max_levels": levels.max().item(),
        "outlier_fraction": (levels > tolerance["outlier_levels"]).float().mean().item(),
        "tolerance": tolerance,
        "decoder": "the GPU's (nvJPEG)" if device.type == "cuda" else "the CPU's (libjpeg-turbo)",
    }
    result["within_tolerance"] = (
        result["mean_levels"] <= tolerance["mean_levels"]
        and result["outlier_fraction"] <= tolerance["outlier_fraction"]
    )
    return result


def time_pipelines(files: list[str], image_size: int, device: torch.device, batch: int, rounds: int) -> dict:
    """Images/s of the device pipeline's decode-and-augment step (the bytes already read, as the loader's
    workers hand them over) and of the CPU pipeline in this process, median of `rounds`."""
    cpu, on_device = _datasets(files, image_size)
    encoded = next(iter(train_loader(on_device, batch, 0, 0, False, collate=on_device.collate())))[0]
    cpu_loader = train_loader(cpu, batch, 0, 0, False)

    def device_step() -> None:
        encoded.to(device)

    def cpu_step() -> None:
        next(iter(cpu_loader))

    seconds: dict[str, list[float]] = {"device": [], "cpu": []}
    for step in (device_step, cpu_step):
        step()  # warm-up (nvJPEG's handles, the first kernels)
    for _ in range(rounds):
        for name, step in (("device", device_step), ("cpu", cpu_step)):
            synchronize(device)
            start = time.perf_counter()
            step()
            synchronize(device)
            seconds[name].append(time.perf_counter() - start)
    return {
        "batch": batch,
        "device": str(device),
        "device_images_per_s": batch / statistics.median(seconds["device"]),
        "cpu_images_per_s_one_process": batch / statistics.median(seconds["cpu"]),
        "torch_threads": torch.get_num_threads(),
    }


def input_section(folder: Path, device: torch.device, tiny: bool) -> dict:
    """Write the files, compare the pipelines and time them: gpu.py's input-pipeline part."""
    from .input_pipeline import write_photos

    count, size, batch = (4, 32, 4) if tiny else (256, 224, 128)
    files = [path for path, _ in write_photos(folder, count, classes=1)]
    return {
        "comparison": compare_pipelines(files, size, device),
        "timing": time_pipelines(files, size, device, batch, rounds=2 if tiny else 5),
        "image_size": size,
    }


def summary_lines(section: dict) -> list[str]:
    comparison, timing = section["comparison"], section["timing"]
    verdict = "within" if comparison["within_tolerance"] else "OUTSIDE"
    tolerance = comparison["tolerance"]
    stated = "" if tolerance.get("measured", True) else ", stated for a GPU decoder before any was measured"
    return [
        f"input pipeline at {section['image_size']} px, batch {timing['batch']}: decode + crop + flip + RandAugment "
        f"+ normalise on "
        f"{timing['device']} {timing['device_images_per_s']:.0f} images/s; CPU pipeline in one process "
        f"({timing['torch_threads']} threads) {timing['cpu_images_per_s_one_process']:.0f} images/s",
        f"  device vs CPU pipeline on {comparison['images']} images: mean {comparison['mean_levels']:.2f} levels of "
        f"255, max {comparison['max_levels']:.0f}, {100 * comparison['outlier_fraction']:.2f}% of values above "
        f"{tolerance['outlier_levels']:.0f} levels, decoded by {comparison['decoder']}: {verdict} the tolerance "
        f"(mean <= {tolerance['mean_levels']}, <= {100 * tolerance['outlier_fraction']:.0f}% above "
        f"{tolerance['outlier_levels']:.0f}{stated})",
    ]
