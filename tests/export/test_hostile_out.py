"""`vitlab export --out` never writes through a symbolic link and never over an existing file unless
told to (--overwrite); each refusal is one line before the model loads, and loses nothing."""

from __future__ import annotations

import os

import pytest

import vitlab
from helpers import one_line_error, randomise_
from vitlab.cli import main
from vitlab.model import ViTConfig

pytestmark = pytest.mark.integration

TINY = ViTConfig(image_size=16, patch_size=8, dim=16, depth=1, num_heads=2, mlp_dim=32, num_classes=3)


@pytest.fixture
def checkpoint(tmp_path):
    return vitlab.save_pretrained(randomise_(vitlab.create_model(TINY)), tmp_path / "ckpt")


def export(checkpoint, out, *argv: str) -> list[str]:
    return ["export", "--ckpt", str(checkpoint), "--out", str(out), *argv]


@pytest.mark.fault("hostile-input", kinds=2)
def test_an_out_that_is_a_link_is_refused_and_its_target_kept(tmp_path, checkpoint, capsys):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    link = tmp_path / "model.npz"
    os.symlink(target, link)
    for extra in ([], ["--overwrite"]):
        line = one_line_error(capsys, export(checkpoint, link, "--format", "npz", *extra))
        assert f"--out {link}: is a symbolic link (to {target})" in line, line
    assert target.read_text() == "keep me\n" and os.readlink(link) == str(target)


@pytest.mark.fault("hostile-input", kinds=2)
@pytest.mark.parametrize("format, name", [("timm", "folder-out"), ("npz", "model.npz")])
def test_an_existing_out_is_refused_unless_overwrite(tmp_path, checkpoint, capsys, format, name):
    out = tmp_path / name
    out.write_text("an earlier file\n")
    line = one_line_error(capsys, export(checkpoint, out, "--format", format))
    assert f"--out {out}: exists (a file); pass --overwrite to replace it" in line, line
    assert out.read_text() == "an earlier file\n"
    if format == "npz":
        assert main(export(checkpoint, out, "--format", format, "--overwrite")) == 0
        assert vitlab.load(out, act=TINY.act).config.dim == TINY.dim
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left


def test_a_folder_export_writes_into_an_empty_folder(tmp_path, checkpoint, capsys):
    (tmp_path / "hf").mkdir()
    assert main(export(checkpoint, tmp_path / "hf", "--format", "hf")) == 0
    assert (tmp_path / "hf" / "config.json").is_file()
    line = one_line_error(capsys, export(checkpoint, tmp_path / "hf", "--format", "hf"))
    assert "exists (a folder); pass --overwrite" in line
    (tmp_path / "hf" / "notes.txt").write_text("mine\n")
    assert main(export(checkpoint, tmp_path / "hf", "--format", "hf", "--overwrite")) == 0
    assert (tmp_path / "hf" / "notes.txt").read_text() == "mine\n"  # --overwrite replaces the export's files only
