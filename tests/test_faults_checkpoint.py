"""Atomic checkpoint writes (issue 6): `latest` only ever names a complete checkpoint; a failed or
interrupted write, or a full disk, leaves the previous one usable; sharded folders likewise."""

from __future__ import annotations

import errno
import shutil
import subprocess
import uuid

import pytest
import torch

from vitlab.train import checkpoint as ckpt
from vitlab.weights import CheckpointError


def state(step: int, size: int = 1000) -> dict:
    return {"step": step, "model": {"weight": torch.full((size,), float(step))}}


def saved_step(out) -> int:
    return ckpt.load_checkpoint(ckpt.latest_checkpoint(out))["step"]


class FullDisk:
    """A file that accepts `room` bytes, then fails as a full disk does."""

    def __init__(self, file, room: int) -> None:
        self.file, self.room = file, room

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.file.write(data)

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


@pytest.mark.fault("disk")
def test_a_full_disk_is_one_clear_error_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    ckpt.save_checkpoint(tmp_path, 1, state(1), keep=3)
    monkeypatch.setattr(ckpt, "open", lambda path, mode: FullDisk(open(path, mode), room=2000), raising=False)
    with pytest.raises(CheckpointError, match=r"step-00000002\.pt: cannot write \(the disk is full\); the "
                                              r"previous checkpoint is kept"):
        ckpt.save_checkpoint(tmp_path, 2, state(2), keep=3)
    assert saved_step(tmp_path) == 1
    assert sorted(p.name for p in (tmp_path / ckpt.FOLDER).iterdir()) == ["latest", "step-00000001.pt"]


@pytest.mark.fault("disk")
def test_a_real_full_disk(tmp_path):
    """The same on a 256 KiB tmpfs, where torch.save meets a real ENOSPC (needs root to mount)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if shutil.which("mount") is None or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", f"vitlab-test-{uuid.uuid4().hex[:8]}", str(disk)],
            capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        ckpt.save_checkpoint(disk, 1, state(1, size=20_000), keep=3)  # 80 kB
        with pytest.raises(CheckpointError, match=r"cannot write \(the disk is full\)"):
            ckpt.save_checkpoint(disk, 2, state(2, size=60_000), keep=3)  # 240 kB: no room beside the first
        assert saved_step(disk) == 1
        assert not list((disk / ckpt.FOLDER).glob(".*"))  # the partial file was removed
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.fault("kill")
def test_an_interrupted_write_leaves_latest_on_the_previous_checkpoint(tmp_path, monkeypatch):
    ckpt.save_checkpoint(tmp_path, 3, state(3), keep=3)

    def interrupted(document, file, step):
        file.write(b"PK\x03\x04 half a zip file")
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt, "_save_document", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(tmp_path, 6, state(6), keep=3)
    assert saved_step(tmp_path) == 3
    assert not (tmp_path / ckpt.FOLDER / ckpt.checkpoint_name(6)).exists()


@pytest.mark.fault("kill", kinds=2)
def test_leftovers_of_killed_writers_are_removed_and_only_the_newest_k_kept(tmp_path):
    folder = tmp_path / ckpt.FOLDER
    for step in (1, 2, 3):
        ckpt.save_checkpoint(tmp_path, step, state(step), keep=2)
    (folder / f".step-00000004.pt{ckpt.PARTIAL}12345").write_bytes(b"half")  # a SIGKILLed writer's file
    (folder / f".step-00000005{ckpt.PARTIAL}folder").mkdir()  # and a sharded one's folder
    ckpt.save_checkpoint(tmp_path, 4, state(4), keep=2)
    assert sorted(p.name for p in folder.iterdir()) == ["latest", "step-00000003.pt", "step-00000004.pt"]
    assert saved_step(tmp_path) == 4


@pytest.mark.fault("kill")
def test_sharded_checkpoint_folders_are_renamed_into_place_whole(tmp_path):
    folder = ckpt.checkpoint_dir(tmp_path)
    target = folder / "step-00000010"
    with ckpt.atomic_folder(target) as partial:
        assert partial.parent == folder and partial.name.startswith(".") and not target.exists()
        (partial / "__0_0.distcp").write_bytes(b"shard 0")
        (partial / ".metadata").write_bytes(b"index")
    ckpt.publish(tmp_path, target, keep=1)
    assert ckpt.latest_checkpoint(tmp_path) == target and (target / ".metadata").read_bytes() == b"index"

    with pytest.raises(RuntimeError, match="rank 1 failed"), ckpt.atomic_folder(folder / "step-00000020") as partial:
        (partial / "__0_0.distcp").write_bytes(b"half a shard")
        raise RuntimeError("rank 1 failed")
    assert ckpt.list_checkpoints(tmp_path) == [target] and ckpt.latest_checkpoint(tmp_path) == target
    assert sorted(p.name for p in folder.iterdir()) == ["latest", "step-00000010"]

    with ckpt.atomic_folder(folder / "step-00000030", commit=False) as partial:  # a rank that does not rename
        (partial / "__1_0.distcp").write_bytes(b"shard 1")
    assert partial.is_dir() and not (folder / "step-00000030").exists()
    with ckpt.atomic_folder(folder / "step-00000030") as same:  # the committing rank: same partial folder
        assert same == partial
        (same / "__0_0.distcp").write_bytes(b"shard 0")
    assert not partial.exists() and (folder / "step-00000030" / "__1_0.distcp").read_bytes() == b"shard 1"
    ckpt.publish(tmp_path, folder / "step-00000030", keep=1)
    assert ckpt.list_checkpoints(tmp_path) == [folder / "step-00000030"]  # the older folder was pruned
