"""--gpu-decode's batches cross from loader workers as a few packed tensors: a run at batch 256 with two
workers trains within a limit of 1024 open files (the device pipeline, its decoding run on the CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

FEW_FILES = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
sys.path.insert(0, sys.argv[2])
import time
from helpers import tiny_config
from vitlab.training import run_parts
from vitlab.training.callbacks import Callback
from vitlab.training.trainer import Trainer
run_parts.decodes_on_cuda = lambda config: True  # the device pipeline, its decoding run on the CPU


class SlowSteps(Callback):  # as a real model's step takes: the workers fill their two batches ahead
    def on_step_end(self, trainer, loss):
        time.sleep(3)


folder = Path(sys.argv[1])
config = tiny_config(
    folder / "run",
    data={"decode_device": "cuda", "source": f"imagefolder:{folder / 'images'}", "batch_size": 256, "workers": 2},
    augment={"randaugment": None, "mixup": 0.0, "cutmix": 0.0, "reprob": 1.0},
    schedule={"steps": 4, "warmup_steps": 1},
    run={"eval_every": 4, "device": "cpu"},
)
print(Trainer(config, [SlowSteps()]).fit().summary["steps"])
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_device_batches_cross_from_two_workers_within_1024_open_files(tmp_path):
    """Batches of 256 encoded files, each with its erasing noise, two ahead in each of two workers: a
    process allowed 1024 open files trains (the batches cross as a few packed tensors, not a tensor
    per file and per noise, each a file descriptor held until the trainer takes the batch)."""
    for index in range(1536):  # six batches: four ahead (two per worker) of 256 files each
        path = tmp_path / "images" / f"c{index % 2}" / f"{index}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        coarse = np.random.default_rng(index).integers(0, 256, (4, 5, 3), dtype=np.uint8)
        Image.fromarray(coarse).resize((12, 10), Image.Resampling.BICUBIC).save(path, quality=90)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    tests = str(Path(__file__).parents[1])
    result = subprocess.run(
        [sys.executable, "-c", FEW_FILES, str(tmp_path), tests], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-1] == "4"
