"""Atomic checkpoint writes (issue 6): `latest` only ever names a complete checkpoint; a failed or
interrupted write, or a full disk, leaves the previous one usable; sharded folders likewise."""

from __future__ import annotations

import errno
import shutil
import subprocess
import uuid

import pytest
import torch

from vitlab.training import atomic_files as files
from vitlab.training import checkpoint as ckpt
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


@pytest.mark.unit
@pytest.mark.fault("disk")
def test_a_full_disk_is_one_clear_error_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    ckpt.save_checkpoint(tmp_path, 1, state(1), keep=3)
    monkeypatch.setattr(files, "open", lambda path, mode: FullDisk(open(path, mode), room=2000), raising=False)
    with pytest.raises(
        CheckpointError,
        match=r"step-00000002\.pt: cannot write \(the disk is full\); the "
        r"previous checkpoint is kept",
    ):
        ckpt.save_checkpoint(tmp_path, 2, state(2), keep=3)
    assert saved_step(tmp_path) == 1
    assert sorted(p.name for p in (tmp_path / ckpt.FOLDER).iterdir()) == [
        "latest",
        "step-00000001.pt",
        "step-00000001.sha256",
    ]


@pytest.mark.integration
@pytest.mark.fault("disk")
def test_a_real_full_disk(tmp_path):
    """The same on a 256 KiB tmpfs, where torch.save meets a real ENOSPC (needs root to mount)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if (
        shutil.which("mount") is None
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", f"vitlab-test-{uuid.uuid4().hex[:8]}", str(disk)],
            capture_output=True,
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        ckpt.save_checkpoint(disk, 1, state(1, size=20_000), keep=3)  # 80 kB
        with pytest.raises(CheckpointError, match=r"cannot write \(the disk is full\)"):
            ckpt.save_checkpoint(disk, 2, state(2, size=60_000), keep=3)  # 240 kB: no room beside the first
        assert saved_step(disk) == 1
        assert not list((disk / ckpt.FOLDER).glob(".*"))  # the partial file was removed
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.unit
@pytest.mark.fault("kill")
def test_an_interrupted_write_leaves_latest_on_the_previous_checkpoint(tmp_path, monkeypatch):
    ckpt.save_checkpoint(tmp_path, 3, state(3), keep=3)

    def interrupted(document, file):
        file.write(b"PK\x03\x04 half a zip file")
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt.torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(tmp_path, 6, state(6), keep=3)
    assert saved_step(tmp_path) == 3
    assert not (tmp_path / ckpt.FOLDER / ckpt.checkpoint_name(6)).exists()


@pytest.mark.unit
@pytest.mark.fault("kill", kinds=2)
def test_leftovers_of_killed_writers_are_removed_and_only_the_newest_k_kept(tmp_path):
    folder = tmp_path / ckpt.FOLDER
    for step in (1, 2, 3):
        ckpt.save_checkpoint(tmp_path, step, state(step), keep=2)
    (folder / f".step-00000004.pt{files.PARTIAL}12345").write_bytes(b"half")  # a SIGKILLed writer's file
    (folder / f".step-00000005{files.PARTIAL}folder").mkdir()  # and a sharded one's folder
    ckpt.save_checkpoint(tmp_path, 4, state(4), keep=2)
    assert sorted(p.name for p in folder.iterdir()) == [
        "latest",
        "step-00000003.pt",
        "step-00000003.sha256",
        "step-00000004.pt",
        "step-00000004.sha256",
    ]
    assert saved_step(tmp_path) == 4


@pytest.mark.unit
@pytest.mark.fault("kill")
def test_sharded_checkpoint_folders_are_renamed_into_place_whole(tmp_path):
    folder = ckpt.checkpoint_dir(tmp_path)
    target = folder / "step-00000010"
    with files.atomic_folder(target) as partial:
        assert partial.parent == folder and partial.name.startswith(".") and not target.exists()
        (partial / "__0_0.distcp").write_bytes(b"shard 0")
        (partial / ".metadata").write_bytes(b"index")
    ckpt.publish(tmp_path, target, keep=1)
    assert ckpt.latest_checkpoint(tmp_path) == target and (target / ".metadata").read_bytes() == b"index"

    with pytest.raises(RuntimeError, match="rank 1 failed"), files.atomic_folder(folder / "step-00000020") as partial:
        (partial / "__0_0.distcp").write_bytes(b"half a shard")
        raise RuntimeError("rank 1 failed")
    assert ckpt.list_checkpoints(tmp_path) == [target] and ckpt.latest_checkpoint(tmp_path) == target
    assert sorted(p.name for p in folder.iterdir()) == ["latest", "step-00000010", "step-00000010.sha256"]

    with files.atomic_folder(folder / "step-00000030", commit=False) as partial:  # a rank that does not rename
        (partial / "__1_0.distcp").write_bytes(b"shard 1")
    assert partial.is_dir() and not (folder / "step-00000030").exists()
    with files.atomic_folder(folder / "step-00000030") as same:  # the committing rank: same partial folder
        assert same == partial
        (same / "__0_0.distcp").write_bytes(b"shard 0")
    assert not partial.exists() and (folder / "step-00000030" / "__1_0.distcp").read_bytes() == b"shard 1"
    ckpt.publish(tmp_path, folder / "step-00000030", keep=1)
    assert ckpt.list_checkpoints(tmp_path) == [folder / "step-00000030"]  # the older folder was pruned


# -- checksums: a checkpoint that changed after it was written is passed over --------------------------
def flip(path, count: int = 4096) -> None:
    """Invert `count` bytes in the middle of a file (its tensor data: it still loads)."""
    data = bytearray(path.read_bytes())
    start = len(data) // 2 - count // 2
    data[start : start + count] = bytes(b ^ 0xFF for b in data[start : start + count])
    path.write_bytes(bytes(data))


def two_checkpoints(out) -> list:
    return [ckpt.save_checkpoint(out, step, state(step), keep=3) for step in (1, 2)]


@pytest.mark.unit
@pytest.mark.fault("checkpoints", kinds=6)
def test_a_changed_missing_or_unlisted_file_is_passed_over_for_the_newest_intact_one(tmp_path, caplog):
    faults = {
        "flipped": lambda path: flip(path),
        "truncated": lambda path: path.write_bytes(path.read_bytes()[:-1]),
        "deleted": lambda path: path.unlink(),
        "checksum deleted": lambda path: files.checksum_file(path).unlink(),
        "checksum garbled": lambda path: files.checksum_file(path).write_text("not a checksum\n"),
        "pointer names nothing": lambda path: (path.parent / ckpt.LATEST).write_text("step-00000099.pt\n"),
    }
    for name, fault in faults.items():
        out = tmp_path / name
        first, second = two_checkpoints(out)
        assert ckpt.newest_valid_checkpoint(out) == second
        fault(second)
        expected, culprit = (second, "step-00000099") if name == "pointer names nothing" else (first, "step-00000002")
        caplog.clear()
        with caplog.at_level("WARNING", logger="vitlab"):
            assert ckpt.newest_valid_checkpoint(out) == expected, name
        said = " ".join(r.getMessage() for r in caplog.records)
        assert culprit in said and f"resuming from {expected}" in said, (name, said)
    with pytest.raises(
        CheckpointError,
        match=r"step-00000002\.pt: SHA-256 [0-9a-f]{16}\.\.\. differs from the "
        r"[0-9a-f]{16}\.\.\. recorded in step-00000002\.sha256",
    ):
        files.verify_checkpoint(tmp_path / "flipped" / ckpt.FOLDER / "step-00000002.pt")


def write_sharded(out, step: int):
    path = ckpt.checkpoint_dir(out) / f"step-{step:08d}"
    with files.atomic_folder(path) as partial:
        (partial / "__0_0.distcp").write_bytes(bytes(range(256)) * step)
        (partial / "__1_0.distcp").write_bytes(bytes(range(256)) * (step + 1))
        (partial / ".metadata").write_bytes(b"index")
    ckpt.publish(out, path, keep=3)
    return path


@pytest.mark.unit
@pytest.mark.fault("checkpoints", kinds=4)
def test_every_file_of_a_sharded_checkpoint_is_checksummed(tmp_path):
    older, newest = write_sharded(tmp_path, 10), write_sharded(tmp_path, 20)
    assert (files.checksum_file(newest)).read_text().count("step-00000020/") == 3
    faults = [
        (lambda: flip(newest / "__1_0.distcp", 100), r"__1_0\.distcp: SHA-256 .* differs"),
        (lambda: (newest / "extra").write_bytes(b"x"), r"extra: not listed in step-00000020\.sha256"),
        (lambda: (newest / ".metadata").unlink(), r"\.metadata: missing"),
        (lambda: shutil.copytree(older, newest, dirs_exist_ok=True), r"__0_0\.distcp: SHA-256 .* differs"),
    ]
    for fault, match in faults:
        files.verify_checkpoint(newest)
        fault()
        with pytest.raises(CheckpointError, match=match):
            files.verify_checkpoint(newest)
        assert ckpt.newest_valid_checkpoint(tmp_path) == older
        shutil.rmtree(newest)
        assert write_sharded(tmp_path, 20) == newest


@pytest.mark.integration
@pytest.mark.fault("checkpoints", kinds=3)
def test_resume_passes_over_a_flipped_latest_finds_one_without_a_pointer_and_says_when_none_is_left(
    tmp_path, caplog, capsys
):
    from helpers import TINY_FLAGS, tiny_config
    from vitlab.cli import main
    from vitlab.training import Trainer

    run = {"ckpt_every_steps": 2, "keep_ckpts": 3}
    Trainer(tiny_config(tmp_path, schedule={"steps": 4}, run=run)).fit()
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest.name == "step-00000004.pt"
    flip(latest)  # 4 KiB of its weights: it still loads
    with caplog.at_level("WARNING", logger="vitlab"):
        resumed = Trainer(tiny_config(tmp_path, schedule={"steps": 4}, run={**run, "resume": True}))
    resumed.close()
    assert resumed.step == 2, "resumed from the flipped checkpoint"
    assert any("step-00000004.pt: SHA-256" in r.getMessage() for r in caplog.records)

    latest.unlink()
    (tmp_path / ckpt.FOLDER / ckpt.LATEST).unlink()  # the pointer deleted: the newest checkpoint, not step 0
    again = Trainer(tiny_config(tmp_path, schedule={"steps": 4}, run={**run, "resume": True}))
    again.close()
    assert again.step == 2

    for path in ckpt.list_checkpoints(tmp_path)[:-1]:
        path.unlink()  # as --keep-ckpts 1 leaves it
    flip(ckpt.list_checkpoints(tmp_path)[0])
    status = main(["train", *TINY_FLAGS, "--steps", "4", "--out", str(tmp_path), "--resume"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert status == 2 and error.startswith("vitlab train: error: ")
    assert "none of its 1 checkpoint(s) is intact" in error
    assert "step-00000002.pt: SHA-256" in error
