"""`vitlab predict --out`: rows written as batches finish, resumed after an interruption, a bad file
skipped and named, features rows equal to the model's pre-logits, and --draft offered by predict only."""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import signal
import socket

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import one_line_error, randomise_
from vitlab.cli import build_parser, main
from vitlab.data import read_image
from vitlab.data import stream as stream_data
from vitlab.evaluate import stream
from vitlab.evaluate.predict import eval_transform
from vitlab.model import create_untrained
from vitlab.runlock import RunLock

COUNT = 7  # files, predicted in batches of 2: four batches, the last one short


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("predict") / "model"
    options = dict(image_size=16, depth=1, dim=16, num_heads=2, mlp_dim=32, num_classes=6)
    randomise_(create_untrained("Ti/4", **options)).save_pretrained(folder)
    return folder


@pytest.fixture
def pictures(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "pictures"
    folder.mkdir()
    for index in range(COUNT):
        Image.fromarray(rng.integers(0, 256, (20 + index, 24, 3), dtype=np.uint8)).save(folder / f"{index}.png")
    return folder


def predict(model_folder, *argv: str) -> int:
    return main(
        ["predict", "--ckpt", str(model_folder), "--batch-size", "2", "--workers", "0", "--device", "cpu", *argv]
    )


def read_rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.unit
def test_rows_are_written_as_each_batch_finishes(model_folder, pictures, tmp_path, monkeypatch):
    out = tmp_path / "top.csv"
    lines_seen = []
    run = stream.StreamPredictor.run

    def watched(self, batch):
        lines_seen.append(len(out.read_text().splitlines()))  # what is on disk as this batch starts
        return run(self, batch)

    monkeypatch.setattr(stream.StreamPredictor, "run", watched)
    assert predict(model_folder, str(pictures), "--out", str(out), "--topk", "3") == 0
    assert lines_seen == [1, 3, 5, 7]  # the header, then two rows per finished batch
    rows = read_rows(out)
    assert [row["path"] for row in rows] == [str(pictures / f"{i}.png") for i in range(COUNT)]
    probs = np.array([[float(row[f"prob_{k}"]) for k in (1, 2, 3)] for row in rows])
    assert np.all(np.diff(probs, axis=1) <= 0) and np.all(probs > 0) and len({row["label_1"] for row in rows}) > 1


@pytest.mark.unit
def test_json_on_stdout_streams_one_list_and_stays_whole_when_interrupted(model_folder, pictures, monkeypatch, capsys):
    run, printed = stream.StreamPredictor.run, []

    def watched(self, batch):
        printed.append(capsys.readouterr().out)  # what stdout holds as this batch starts
        if len(printed) == 4:
            raise KeyboardInterrupt
        return run(self, batch)

    monkeypatch.setattr(stream.StreamPredictor, "run", watched)
    assert predict(model_folder, str(pictures), "--json") == 130
    assert [text.count('"path"') for text in printed] == [0, 2, 2, 2]  # each batch's rows before the next
    rows = json.loads("".join(printed) + capsys.readouterr().out)  # the three finished batches, a whole list
    assert [row["path"] for row in rows] == [str(pictures / f"{i}.png") for i in range(6)]
    assert all(len(row["top"]) == 5 for row in rows)


@pytest.mark.unit
def test_an_interrupted_run_resumes_where_it_stopped(model_folder, pictures, tmp_path, monkeypatch, caplog, capsys):
    whole, out = tmp_path / "whole.csv", tmp_path / "top.csv"
    assert predict(model_folder, str(pictures), "--out", str(whole)) == 0
    run, calls = stream.StreamPredictor.run, []

    def stops_at_the_third(self, batch):
        calls.append(len(batch.positions))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return run(self, batch)

    monkeypatch.setattr(stream.StreamPredictor, "run", stops_at_the_third)
    assert predict(model_folder, str(pictures), "--out", str(out)) == 130
    text = out.read_text()
    assert len(text.splitlines()) == 5  # the header and two batches
    out.write_text(text + text.splitlines()[-1][:9])  # and a row cut short by the interruption
    calls.clear()
    monkeypatch.setattr(stream.StreamPredictor, "run", run)
    with caplog.at_level(logging.INFO, logger="vitlab"):
        assert predict(model_folder, str(pictures), "--out", str(out)) == 0
    assert "4 of 7 files already predicted, 3 to go" in caplog.text
    assert read_rows(out) == read_rows(whole)  # every file once, in order, the same numbers


def interrupted_with_features(model_folder, pictures, tmp_path, done: int):
    """A run with --out and --features whose CSV keeps `done` rows, as after an interruption: (argv,
    the CSV's text, the features file)."""
    out, features = tmp_path / "top.csv", tmp_path / "features.npy"
    argv = ["predict", "--ckpt", str(model_folder), str(pictures), "--out", str(out), "--features", str(features)]
    assert main(argv) == 0
    kept = "".join(out.read_text().splitlines(keepends=True)[: 1 + done])
    out.write_text(kept)
    return argv, kept, features


@pytest.mark.unit
@pytest.mark.fault("listing", kinds=3)
@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_odd_file_names_go_to_the_file_and_back_and_a_row_cut_inside_one_is_redone(model_folder, tmp_path, suffix):
    folder, out = tmp_path / "odd", tmp_path / f"top{suffix}"
    folder.mkdir()
    names = [os.fsdecode(b"caf\xe9.png"), 'comma, "quote".png', "new\nline.png"]  # not UTF-8; quoted; a newline
    for index, name in enumerate(names):
        Image.new("RGB", (20, 20), (60 * index, 40, 90)).save(folder / name, format="PNG")
    assert predict(model_folder, str(folder), "--out", str(out)) == 0
    whole = out.read_bytes()
    # the run stopped inside the last row: in the CSV just after the name's newline, which it quotes
    cut = whole.index(b"new\n") + 4 if suffix == ".csv" else whole.rindex(b"new") + 4
    out.write_bytes(whole[:cut])
    assert predict(model_folder, str(folder), "--out", str(out)) == 0
    assert out.read_bytes() == whole  # the part row cut off, redone once
    if suffix == ".csv":
        with open(out, newline="", encoding="utf-8", errors="surrogateescape") as handle:
            paths = [row["path"] for row in csv.DictReader(handle)]
    else:
        paths = [json.loads(line)["path"] for line in out.read_text().splitlines()]
    assert sorted(paths) == sorted(str(folder / name) for name in names)


@pytest.mark.unit
@pytest.mark.fault("bad-input", kinds=1)
def test_a_resume_without_its_features_file_is_refused(model_folder, pictures, tmp_path, capsys):
    argv, kept, features = interrupted_with_features(model_folder, pictures, tmp_path, done=4)
    features.unlink()  # a new file would hold zeros for those four
    line = one_line_error(capsys, argv)
    assert f"--features {features} is missing, yet --out already holds 4 files' rows" in line, line
    assert (tmp_path / "top.csv").read_text() == kept and not features.exists()


@pytest.mark.integration
@pytest.mark.fault("hostile-input", kinds=1)
def test_a_resume_with_its_features_file_cut_short_names_it(model_folder, pictures, tmp_path, capsys):
    argv, kept, features = interrupted_with_features(model_folder, pictures, tmp_path, done=4)
    with features.open("r+b") as handle:
        handle.truncate(features.stat().st_size - 10)
    line = one_line_error(capsys, argv)
    assert f"--features {features}: its header declares float32 (7, 16)" in line and "(cut short)" in line, line
    assert "already holds 4 files' rows" in line and (tmp_path / "top.csv").read_text() == kept


@pytest.mark.unit
@pytest.mark.fault("bad-input", kinds=1)
def test_a_resume_with_features_over_other_files_is_refused(model_folder, pictures, tmp_path, capsys):
    argv, kept, _ = interrupted_with_features(model_folder, pictures, tmp_path, done=2)
    (pictures / "0.png").rename(pictures / "9.png")  # as many files, but the rows would shift by one
    line = one_line_error(capsys, argv)
    assert re.search(r"other options \(file_list '7 files, sha256 \w+' then, '7 files, sha256 \w+' now\)", line), line
    assert (tmp_path / "top.csv").read_text() == kept


@pytest.mark.unit
@pytest.mark.fault("concurrency", kinds=2)
@pytest.mark.parametrize("option", ["--out", "--features"])
def test_a_second_run_on_the_same_output_is_refused_naming_the_first(model_folder, pictures, tmp_path, capsys, option):
    out, features = tmp_path / "top.csv", tmp_path / "features.npy"
    argv = ["predict", "--ckpt", str(model_folder), str(pictures), "--out", str(out), "--features", str(features)]
    live = RunLock.beside(out if option == "--out" else features, option)
    live.acquire()  # another run writing there (an flock: a second process is refused the same way)
    try:
        line = one_line_error(capsys, argv)
    finally:
        live.release()
    held = out if option == "--out" else features
    assert f"{option}: {held} is in use by another run (host {socket.gethostname()} PID {os.getpid()}" in line, line
    assert not features.exists() and (option == "--features" or not out.exists())  # nothing written
    assert predict(model_folder, str(pictures), "--out", str(out), "--features", str(features)) == 0
    assert len(read_rows(out)) == COUNT and not list(tmp_path.glob(".*.holder"))  # released at the end


@pytest.mark.integration
@pytest.mark.fault("kill", kinds=1)
def test_a_worker_killed_mid_run_is_one_line_and_the_rerun_resumes(
    model_folder, pictures, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "top.csv"
    read = stream_data.ImageFiles.__getitem__

    def killed_at_the_fifth(self, index):  # as the out-of-memory killer would, in the worker process
        if torch.utils.data.get_worker_info() is not None and self.positions[index] == 4:
            os.kill(os.getpid(), signal.SIGKILL)
        return read(self, index)

    monkeypatch.setattr(stream_data.ImageFiles, "__getitem__", killed_at_the_fifth)
    chld = signal.getsignal(signal.SIGCHLD)
    try:
        argv = ["predict", "--ckpt", str(model_folder), str(pictures), "--out", str(out), "--batch-size", "2"]
        status = main([*argv, "--workers", "1", "--device", "cpu"])
    finally:
        signal.signal(signal.SIGCHLD, chld)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("vitlab predict: error: a DataLoader worker")]
    assert status == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert "most often by the out-of-memory killer; what was written stays" in lines[0]
    assert len(read_rows(out)) <= 4  # the files before the killed one, at most
    monkeypatch.setattr(stream_data.ImageFiles, "__getitem__", read)
    assert predict(model_folder, str(pictures), "--out", str(out)) == 0
    assert [row["path"] for row in read_rows(out)] == [str(pictures / f"{i}.png") for i in range(COUNT)]


@pytest.mark.unit
@pytest.mark.fault("bad-input", kinds=2)
def test_a_rerun_with_other_options_is_refused_naming_them(model_folder, pictures, tmp_path, capsys):
    out = tmp_path / "top.jsonl"
    assert predict(model_folder, str(pictures), "--out", str(out)) == 0
    capsys.readouterr()
    line = one_line_error(
        capsys, ["predict", "--ckpt", str(model_folder), str(pictures), "--out", str(out), "--topk", "3"]
    )
    assert "was written with other options (topk 5 then, 3 now)" in line, line
    (tmp_path / "other.csv").write_text("path\nx.png\n")
    line = one_line_error(
        capsys, ["predict", "--ckpt", str(model_folder), str(pictures), "--out", str(tmp_path / "other.csv")]
    )
    assert "other.csv exists without its other.csv.options.json" in line, line


@pytest.mark.unit
@pytest.mark.fault("bad-input", kinds=3)
def test_outputs_in_the_way_are_one_line_before_any_work(model_folder, pictures, tmp_path, capsys, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("a model was loaded before the outputs were checked")

    monkeypatch.setattr("vitlab.cli.load_checkpoint", never)
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder.csv").mkdir()
    for flags, words in [
        (["--out", str(tmp_path / "folder.csv")], f"--out {tmp_path / 'folder.csv'}: is a folder, not a file"),
        (
            ["--out", str(tmp_path / "file" / "top.csv")],
            "its folder " + f"{tmp_path / 'file'}: is a file, not a folder",
        ),
        (
            ["--out", str(tmp_path / "top.csv"), "--features", str(tmp_path / "file" / "f.npy")],
            f"--features {tmp_path / 'file' / 'f.npy'}: its folder",
        ),
    ]:
        line = one_line_error(capsys, ["predict", "--ckpt", str(model_folder), str(pictures), *flags])
        assert words in line, line
    assert not (tmp_path / "top.csv").exists()


@pytest.mark.unit
@pytest.mark.fault("images", kinds=1)
def test_a_bad_file_is_skipped_named_and_recorded(model_folder, pictures, tmp_path, capsys):
    (pictures / "3.png").write_bytes(b"")
    out, features = tmp_path / "top.jsonl", tmp_path / "features.npy"
    assert predict(model_folder, str(pictures), "--out", str(out), "--features", str(features)) == 1
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "skipping" in line] == [
        f"vitlab predict: skipping {pictures / '3.png'}: empty file (0 bytes)"
    ]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["path"] for row in rows] == [str(pictures / f"{i}.png") for i in range(COUNT)]
    assert rows[3] == {"path": str(pictures / "3.png"), "skipped": f"{pictures / '3.png'}: empty file (0 bytes)"}
    assert all(len(row["top"]) == 5 for i, row in enumerate(rows) if i != 3)
    matrix = np.load(features)
    assert np.isnan(matrix[3]).all() and np.isfinite(np.delete(matrix, 3, axis=0)).all()


@pytest.mark.unit
def test_features_are_the_models_pre_logits_row_by_row(model_folder, pictures, tmp_path):
    import vitlab

    out, features = tmp_path / "top.csv", tmp_path / "features.npy"
    assert predict(model_folder, str(pictures), "--out", str(out), "--features", str(features)) == 0
    model = vitlab.load(model_folder).eval()
    paths = [row["path"] for row in read_rows(out)]
    transform = eval_transform(model.config)
    with torch.no_grad():
        batch = torch.stack([transform(read_image(path)) for path in paths])
        expected = model.forward_head(model.forward_features(batch), pre_logits=True)
        probabilities = model(batch).softmax(dim=1)
    matrix = np.load(features)
    assert matrix.shape == (COUNT, 16) and matrix.std(axis=0).min() > 1e-4  # rows differ image to image
    np.testing.assert_allclose(matrix, expected.numpy(), rtol=1e-5, atol=1e-5)
    top1 = [float(row["prob_1"]) for row in read_rows(out)]
    np.testing.assert_allclose(top1, probabilities.max(dim=1).values.numpy(), rtol=1e-5)


@pytest.mark.unit
def test_a_feature_extractor_writes_its_representation_alone(pictures, tmp_path, capsys):
    import vitlab

    folder, out, features = tmp_path / "extractor", tmp_path / "files.csv", tmp_path / "features.npy"
    options = dict(image_size=16, depth=1, dim=16, num_heads=2, mlp_dim=32, num_classes=0)
    randomise_(create_untrained("Ti/4", **options)).save_pretrained(folder)
    line = one_line_error(capsys, ["predict", "--ckpt", str(folder), str(pictures), "--out", str(out)])
    assert "is a feature extractor (num_classes=0): it has no classes to predict; pass --out and --features" in line
    assert not out.exists()  # refused before anything is written
    assert predict(folder, str(pictures), "--out", str(out), "--features", str(features)) == 0
    rows = read_rows(out)
    assert list(rows[0]) == ["path", "status", "error"] and [row["status"] for row in rows] == ["ok"] * COUNT
    model = vitlab.load(folder).eval()
    transform = eval_transform(model.config)
    with torch.no_grad():  # a feature extractor's output is its representation
        expected = model(torch.stack([transform(read_image(row["path"])) for row in rows]))
    matrix = np.load(features)
    assert matrix.shape == (COUNT, 16) and matrix.std(axis=0).min() > 1e-4
    np.testing.assert_allclose(matrix, expected.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.unit
def test_a_topk_above_the_classes_shows_each_and_says_so(model_folder, pictures, tmp_path, caplog):
    out = tmp_path / "top.csv"
    with caplog.at_level(logging.INFO, logger="vitlab"):
        assert predict(model_folder, str(pictures), "--out", str(out), "--topk", "100") == 0
    assert f"--topk 100: {model_folder} has 6 classes, each shown" in caplog.text
    header = list(read_rows(out)[0])
    assert header[-2:] == ["label_6", "prob_6"]  # no empty columns for classes the model lacks


@pytest.mark.unit
def test_draft_decoding_is_offered_by_predict_only(model_folder, tmp_path, capsys):
    rng = np.random.default_rng(1)
    photo = tmp_path / "photo.jpg"
    Image.fromarray(rng.integers(0, 256, (375, 500, 3), dtype=np.uint8)).resize((500, 375)).save(photo, quality=90)
    assert read_image(photo).size == (500, 375)
    assert read_image(photo, draft=18).size == (63, 47)  # 1/8 scale: both sides still at least 18
    outputs = {}
    for flags in ((), ("--draft",)):
        assert predict(model_folder, str(photo), "--json", *flags) == 0
        outputs[flags] = json.loads(capsys.readouterr().out)[0]["top"]
    assert outputs[()] != outputs[("--draft",)]  # other pixels, other probabilities
    parser = build_parser()
    assert parser.parse_args(["predict", "--ckpt", "m", "x.jpg", "--draft"]).draft
    for command in (["eval", "--ckpt", "m"], ["train"]):
        with pytest.raises(SystemExit):
            parser.parse_args([*command, "--draft"])
    capsys.readouterr()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_fast_path_gives_the_eager_numbers_and_says_so(model_folder, pictures, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="vitlab"):
        assert predict(model_folder, str(pictures), "--out", str(tmp_path / "fast.csv"), "--fast", "on") == 0
        assert "fast path (--fast on)" in caplog.text
        assert predict(model_folder, str(pictures), "--out", str(tmp_path / "eager.csv")) == 0
    assert re.search(r"eager path \((fp32 on CPU with MKL|\d+ images, fewer than)", caplog.text), caplog.text
    fast, eager = read_rows(tmp_path / "fast.csv"), read_rows(tmp_path / "eager.csv")
    assert [row["label_1"] for row in fast] == [row["label_1"] for row in eager]
    np.testing.assert_allclose(
        [float(row["prob_1"]) for row in fast], [float(row["prob_1"]) for row in eager], rtol=1e-4
    )


@pytest.mark.integration
@pytest.mark.fault("hostile-input", kinds=2)
def test_csv_cells_a_spreadsheet_would_run_are_escaped_and_read_back_on_resume(tmp_path, monkeypatch):
    folder, out = tmp_path / "odd", tmp_path / "top.csv"
    folder.mkdir()
    names = ["=cmd|'-C calc'!A0.png", "+1.png", "-2.png", "@sum.png", "'quoted.png", "plain.png"]
    for index, name in enumerate(names):
        Image.new("RGB", (20, 20), (40 * index, 40, 90)).save(folder / name, format="PNG")
    classes = ['=HYPERLINK("http://x")', "-minus", "+plus"]
    model = tmp_path / "model"
    options = dict(image_size=16, depth=1, dim=16, num_heads=2, mlp_dim=32, num_classes=3, class_names=classes)
    randomise_(create_untrained("Ti/4", **options)).save_pretrained(model)
    monkeypatch.chdir(folder)  # relative names: the path cells start with those characters
    assert predict(model, "--out", str(out), "--", *names) == 0
    with open(out, newline="") as handle:
        rows = list(csv.reader(handle))[1:]
    cells = [cell for row in rows for cell in row if cell not in ("ok", "")]
    assert sorted(row[0] for row in rows) == sorted("'" + name if name != "plain.png" else name for name in names)
    assert {"'" + name for name in classes} <= set(cells)
    assert not [cell for cell in cells if cell[:1] in ("=", "+", "-", "@")]  # each such cell is text
    whole = out.read_bytes()
    out.write_bytes(b"".join(whole.splitlines(keepends=True)[:3]))  # interrupted after two rows
    assert predict(model, "--out", str(out), "--", *names) == 0
    assert sorted(out.read_bytes().splitlines()) == sorted(whole.splitlines())  # resumed: each file once
    assert predict(model, "--out", str(tmp_path / "raw.csv"), "--raw-csv", "--", *names) == 0
    assert "\n+1.png,ok," in (tmp_path / "raw.csv").read_text()


@pytest.mark.integration
@pytest.mark.fault("hostile-input", kinds=1)  # one per parameter
@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_garbage_line_amid_the_rows_is_refused_by_line_and_nothing_is_dropped(
    model_folder, pictures, tmp_path, capsys, suffix
):
    out = tmp_path / f"top{suffix}"
    assert predict(model_folder, str(pictures), "--out", str(out)) == 0
    lines = out.read_text().splitlines(keepends=True)
    damaged = "".join(lines[:3] + ['garbage, "not a row\n'] + lines[3:])
    out.write_text(damaged)
    argv = ["predict", "--ckpt", str(model_folder), str(pictures), "--out", str(out), "--workers", "0"]
    line = one_line_error(capsys, argv)
    assert f"{out}: line 4 is not a row vitlab writes, yet {len(lines) - 3} rows follow it" in line, line
    assert out.read_text() == damaged


@pytest.mark.integration
@pytest.mark.fault("hostile-input", kinds=1)
def test_an_out_that_is_a_link_is_refused_and_its_target_kept(model_folder, pictures, tmp_path, capsys):
    target, link = tmp_path / "precious.csv", tmp_path / "top.csv"
    target.write_text("keep me\n")
    os.symlink(target, link)
    line = one_line_error(capsys, ["predict", "--ckpt", str(model_folder), str(pictures), "--out", str(link)])
    assert f"--out {link}: is a symbolic link (to {target})" in line and target.read_text() == "keep me\n"
