"""Bad input in a real training run (issue 6): 23 kinds of bad or odd image file mixed into an
ImageFolder of 3000 good ones. Training runs to the end and names each undecodable file once in its
log (data-loader workers included); a folder with too many bad files stops early with one line."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from helpers import BAD_IMAGES, ODD_IMAGES, write_class_folders
from vitlab.cli import main

TINY_MODEL = [
    "--recipe",
    "demo",
    "--image-size",
    "8",
    "--batch-size",
    "64",
    "--threads",
    "1",
    "--set",
    "model.dim=32",
    "--set",
    "model.depth=1",
    "--set",
    "model.num_heads=2",
    "--set",
    "model.mlp_dim=64",
]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.fault("images", kinds=len(ODD_IMAGES) + len(BAD_IMAGES))
@pytest.mark.slow
def test_training_on_a_folder_with_bad_and_odd_files_runs_to_the_end_naming_each_bad_file_once(tmp_path):
    data = tmp_path / "data"
    good = write_class_folders(data, {"dark": 1000, "grey": 1000, "light": 1000})
    for name, make in ODD_IMAGES.items():  # valid but unusual: converted to RGB and used
        (data / "grey" / name).write_bytes(make())
    for name, (make, _) in BAD_IMAGES.items():  # undecodable: 10 of 3023, under the 1% limit
        (data / "light" / name).write_bytes(make())
    assert len(ODD_IMAGES) + len(BAD_IMAGES) >= 12

    # 60 steps of 64 pass over every training image: a bad file that got past the check would be met again.
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "vitlab",
            "train",
            *TINY_MODEL,
            "--data",
            str(data),
            "--steps",
            "60",
            "--workers",
            "2",
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "run" / "model.safetensors").is_file() and "after 60 steps" in run.stdout
    skipped = re.findall(r"skipping unreadable image (\S+): ", run.stderr)
    assert sorted(name.rsplit("/", 1)[-1] for name in skipped) == sorted(BAD_IMAGES), run.stderr
    total = len(good) + len(ODD_IMAGES) + len(BAD_IMAGES)
    assert f"{len(BAD_IMAGES)} of {total} images" in run.stderr  # the odd ones were all kept
    assert "Traceback" not in run.stderr


@pytest.mark.unit
@pytest.mark.fault("images")
def test_a_folder_with_too_many_bad_files_stops_before_training_with_one_line(tmp_path, capsys):
    data = tmp_path / "data"
    write_class_folders(data, {"a": 100, "b": 100})
    for name in ("empty.jpg", "truncated.png", "text_not_image.png"):  # 3 of 203: over 1%
        (data / "b" / name).write_bytes(BAD_IMAGES[name][0]())
    status = main(["train", *TINY_MODEL, "--data", str(data), "--steps", "5", "--out", str(tmp_path / "run")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("vitlab train: error:")]
    assert status == 2 and len(lines) == 1
    assert re.search(
        r"3 of the first \d+ of 203 images in .* cannot be decoded, more than 1% of the split; "
        r"e\.g\. .*empty\.jpg: empty",
        lines[0],
    ), lines[0]
    assert not (tmp_path / "run" / "checkpoints").exists()
