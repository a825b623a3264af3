"""data.decode_device='cuda': the batch logic of decoding on the device, run here with CPU decoding,
and the fallback to the CPU pipeline where no CUDA GPU trains."""

from __future__ import annotations

import io
import logging

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import tiny_config
from vitlab.bench.gpu_input import compare_pipelines
from vitlab.data.datasets import EncodedImages
from vitlab.data.device_decode import DeviceDecodedImages, EncodedBatch, device_transform
from vitlab.data.transforms import train_transform
from vitlab.model import ConfigError
from vitlab.model.config import Preprocessing
from vitlab.training import run_parts
from vitlab.training.config import AugmentSpec
from vitlab.training.loader import train_loader

pytestmark = pytest.mark.unit

AUGMENT = AugmentSpec(crop_scale=(0.35, 1.0), hflip=True)
PLAIN = {"randaugment": None, "mixup": 0.0, "cutmix": 0.0}  # what the device pipeline runs: crop, flip


def photo(seed: int, size=(48, 36)) -> Image.Image:
    coarse = np.random.default_rng(seed).integers(0, 256, (4, 5, 3), dtype=np.uint8)
    return Image.fromarray(coarse).resize(size, Image.Resampling.BICUBIC)


def write_files(folder, count=6):
    """JPEGs (one turned by its EXIF orientation) and a PNG, in two class folders."""
    paths = []
    for index in range(count):
        path = folder / f"c{index % 2}" / (f"{index}.png" if index == 3 else f"{index}.jpg")
        path.parent.mkdir(parents=True, exist_ok=True)
        exif = Image.Exif()
        exif[0x0112] = 6 if index == 1 else 1
        buffer = io.BytesIO()
        photo(index).save(buffer, "PNG" if index == 3 else "JPEG", quality=95, exif=exif.tobytes())
        path.write_bytes(buffer.getvalue())
        paths.append(str(path))
    return paths


def test_device_batches_decoded_on_the_cpu_are_the_cpu_pipelines(tmp_path):
    paths = write_files(tmp_path)
    labels, size = [i % 2 for i in range(len(paths))], (16, 16)
    cpu = EncodedImages(paths, labels, train_transform(size, Preprocessing(), AUGMENT))
    device = DeviceDecodedImages(EncodedImages(paths, labels, device_transform(size, Preprocessing(), AUGMENT)))
    expected = list(train_loader(cpu, 3, 7, 0, False))
    got = list(train_loader(device, 3, 7, 0, False, collate=device.collate()))
    assert len(got) == len(expected) == 2
    for (images, labels_got), (cpu_images, cpu_labels) in zip(got, expected):
        assert isinstance(images, EncodedBatch) and len(images) == 3
        batch = images.to("cpu")
        assert batch.shape == (3, 3, 16, 16) and batch.dtype == torch.float32 and batch.std() > 0.1
        assert torch.equal(labels_got, cpu_labels)
        # the same crops and flips: only the resize's rounding differs (PIL's bicubic against torch's)
        assert (batch - cpu_images).abs().max() * 0.5 * 255 <= 3.0


def test_randaugment_on_the_device_draws_and_applies_the_cpu_pipelines_operations(tmp_path):
    paths = write_files(tmp_path, 8)
    augment = AugmentSpec(crop_scale=(0.35, 1.0), hflip=True, randaugment=(2, 10))
    cpu = EncodedImages(paths, [0] * 8, train_transform(16, Preprocessing(), augment))
    device = DeviceDecodedImages(EncodedImages(paths, [0] * 8, device_transform(16, Preprocessing(), augment)))
    expected, _ = next(iter(train_loader(cpu, 8, 3, 0, False)))
    batch, _ = next(iter(train_loader(device, 8, 3, 0, False, collate=device.collate())))
    assert sum(len(sample.operations) for sample in batch.samples) >= 4  # 8 images x 2 draws at p 0.5
    levels = (batch.to("cpu") - expected).abs() * 0.5 * 255
    assert levels.mean() < 1.0 and (levels > 16).float().mean() < 0.01


def test_random_erasing_on_the_device_pastes_the_cpu_pipelines_box_and_noise(tmp_path):
    paths = write_files(tmp_path, 6)
    augment = AugmentSpec(crop_scale=(0.35, 1.0), hflip=True, reprob=1.0)
    cpu = EncodedImages(paths, [0] * 6, train_transform(16, Preprocessing(), augment))
    device = DeviceDecodedImages(EncodedImages(paths, [0] * 6, device_transform(16, Preprocessing(), augment)))
    expected, _ = next(iter(train_loader(cpu, 6, 5, 0, False)))
    batch, _ = next(iter(train_loader(device, 6, 5, 0, False, collate=device.collate())))
    erased = [sample.erase for sample in batch.samples]
    assert sum(erase is not None for erase in erased) >= 3  # p = 1; a box is found within 10 tries mostly
    got = batch.to("cpu")
    for index, erase in enumerate(erased):
        if erase is not None:
            top, left, noise = erase
            box = (index, slice(None), slice(top, top + noise.shape[1]), slice(left, left + noise.shape[2]))
            assert torch.equal(got[box], expected[box]) and torch.equal(got[box], noise)  # the same noise
    assert ((got - expected).abs() * 0.5 * 255).max() <= 3.0  # and outside the boxes the same crops


def test_the_comparison_sees_a_wrong_pipeline(tmp_path, monkeypatch):
    paths = write_files(tmp_path, 4)
    assert compare_pipelines(paths, 16, torch.device("cpu"))["within_tolerance"]
    import vitlab.data.device_decode as device_decode

    monkeypatch.setattr(device_decode, "orient", lambda image, orientation: image.flip(-2))  # upside down
    result = compare_pipelines(paths, 16, torch.device("cpu"))
    assert not result["within_tolerance"] and result["mean_levels"] > 2.0


def test_without_cuda_the_cpu_pipeline_decodes_and_says_so(tmp_path, caplog):
    config = tiny_config(tmp_path / "run", data={"decode_device": "cuda"}, augment=PLAIN, run={"device": "cpu"})
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        _, splits, test_set = run_parts.build_model_and_data(config)
    notes = [r.getMessage() for r in caplog.records if "decode_device" in r.getMessage()]
    assert len(notes) == 1 and "the CPU pipeline decodes" in notes[0] and "\n" not in notes[0]
    loader, _, _ = run_parts.build_loaders(config, splits, test_set, False, run_parts.Processes())
    images, _ = next(iter(loader))
    assert isinstance(images, torch.Tensor) and images.shape[1:] == (3, 8, 8)


def test_on_a_cuda_run_the_loader_hands_over_encoded_batches(tmp_path, monkeypatch, caplog):
    write_files(tmp_path / "images", 8)
    monkeypatch.setattr(run_parts, "decodes_on_cuda", lambda config: True)  # as on a GPU machine
    config = tiny_config(
        tmp_path / "run",
        data={"decode_device": "cuda", "source": f"imagefolder:{tmp_path / 'images'}", "batch_size": 4},
        augment=PLAIN,
    )
    _, splits, test_set = run_parts.build_model_and_data(config)
    loader, _, _ = run_parts.build_loaders(config, splits, test_set, False, run_parts.Processes())
    images, labels = next(iter(loader))
    assert isinstance(images, EncodedBatch) and images.to("cpu").shape == (4, 3, 8, 8) and labels.shape == (4,)
    digits = tiny_config(tmp_path / "digits", data={"decode_device": "cuda"}, augment=PLAIN)
    with caplog.at_level(logging.WARNING, logger="vitlab"):
        _, splits, _ = run_parts.build_model_and_data(digits)
    assert "holds decoded pixels" in caplog.text and isinstance(splits.train[0][0], torch.Tensor)


@pytest.mark.fault("bad-config", kinds=1)
@pytest.mark.parametrize("augment", [{"rotation": 10.0}, {"zoom": 0.1}])
def test_augmentation_the_device_does_not_run_is_refused(tmp_path, augment):
    config = tiny_config(tmp_path, data={"decode_device": "cuda"}, augment={**PLAIN, **augment})
    with pytest.raises(ConfigError, match=f"augment.{next(iter(augment))}: data.decode_device='cuda'"):
        run_parts.check_run(config)
