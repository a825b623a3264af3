"""`vitlab train / eval / predict`: the model folder and its files, eval's JSON, predictions for image
files, the config's precedence, one-line errors, and SIGTERM -> checkpoint -> --resume."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
import yaml
from PIL import Image

from helpers import TINY_FLAGS
from vitlab.cli import build_parser, main
from vitlab.cli.demo import write_digit_samples
from vitlab.cli.train import build_config

METRIC_KEYS = {"step", "epoch", "loss", "lr", "val_top1", "val_top5", "images_per_s"}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "run"
    assert main(["train", *TINY_FLAGS, "--out", str(out), "--set", "optim.lr=0.003"]) == 0
    return out


@pytest.mark.integration
def test_train_writes_a_loadable_model_folder(trained, capsys):
    from vitlab import load

    names = {p.name for p in trained.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "run.yaml",
        "metrics.jsonl",
        "summary.json",
        "training_curve.png",
        "checkpoints",
    } <= names
    model = load(trained)
    assert model.config.class_names == [str(d) for d in range(10)] and model.config.image_size == (8, 8)
    rows = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [10, 20] and all(METRIC_KEYS <= row.keys() for row in rows)
    summary = json.loads((trained / "summary.json").read_text())
    assert summary["steps"] == 20 and summary["val_top1"] == rows[-1]["val_top1"] and summary["wall_time_s"] > 0
    run = yaml.safe_load((trained / "run.yaml").read_text())
    assert run["recipe"] == "small-data" and run["optim"]["lr"] == 0.003 and run["model"]["variant"] == "mu/4"
    with Image.open(trained / "training_curve.png") as plot:
        assert plot.format == "PNG" and plot.size[0] > 500


@pytest.mark.integration
def test_eval_prints_and_writes_json(trained, tmp_path, capsys):
    report_path = tmp_path / "eval.json"
    assert main(["eval", "--ckpt", str(trained), "--data", "digits", "--out", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    metrics = report["metrics"]
    summary = json.loads((trained / "summary.json").read_text())
    assert metrics["count"] == 360 and report["split"] == "val" and report["image_size"] == [8, 8]
    assert (metrics["top1"], metrics["top5"]) == (summary["val_top1"], summary["val_top5"])
    assert 0.0 <= metrics["top1"] <= metrics["top5"] <= 1.0
    assert report["trained_images_scored"] == 0 and report["settings"]["from"] == str(trained / "run.yaml")
    assert f"top-1 {metrics['top1']:.4f}  top-5 {metrics['top5']:.4f}" in capsys.readouterr().out


@pytest.mark.integration
def test_predict_on_image_files(trained, tmp_path, capsys):
    images = write_digit_samples(tmp_path / "digits", 4)
    Image.open(images[0]).convert("L").save(tmp_path / "grey.png")  # odd but valid: converted to RGB
    (tmp_path / "digits" / "empty.png").write_bytes(b"")  # unreadable: skipped and named
    assert (
        main(
            [
                "predict",
                "--ckpt",
                str(trained),
                str(tmp_path / "digits"),
                str(tmp_path / "grey.png"),
                "--topk",
                "3",
                "--json",
            ]
        )
        == 1
    )
    captured = capsys.readouterr()
    assert "empty.png: empty file" in captured.err
    predictions = json.loads(captured.out)
    assert [p["path"] for p in predictions] == [str(p) for p in images] + [str(tmp_path / "grey.png")]
    for prediction in predictions:
        probs = [entry["prob"] for entry in prediction["top"]]
        assert len(probs) == 3 and probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
        assert all(entry["label"] in [str(d) for d in range(10)] for entry in prediction["top"])
    first, grey = predictions[0]["top"], predictions[-1]["top"]  # the grey copy is the same picture
    assert [e["label"] for e in first] == [e["label"] for e in grey]
    assert [e["prob"] for e in first] == pytest.approx([e["prob"] for e in grey], abs=1e-6)

    assert main(["predict", "--ckpt", str(trained), str(images[1]), "--topk", "2"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{images[1]}: ") and line.count("(") == 2


@pytest.mark.unit
def test_config_file_flags_and_set_in_that_order(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text("recipe: keras-example\noptim: {lr: 0.01, weight_decay: 0.5}\nschedule: {steps: 7}\n")
    args = build_parser().parse_args(
        [
            "train",
            "--config",
            str(path),
            "--lr",
            "0.02",
            "--set",
            "optim.lr=0.03",
            "--out",
            str(tmp_path / "out"),
            "--ema",
            "--grad-accum",
            "2",
        ]
    )
    config = build_config(args)
    assert config.recipe == "keras-example" and config.model.pool == "flatten"
    assert (config.optim.lr, config.optim.weight_decay, config.schedule.steps, config.schedule.epochs) == (
        0.03,
        0.5,
        7,
        None,
    )
    assert (config.optim.ema_decay, config.optim.grad_accum, config.run.out) == (0.9999, 2, str(tmp_path / "out"))


@pytest.mark.unit
@pytest.mark.parametrize(
    "extra, message",
    [
        (["--set", "optim.lrr=1"], "--set optim.lrr=1: unknown key 'optim.lrr' (did you mean optim.lr?); optim has"),
        (["--set", "optim.lr=fast"], "optim.lr: expected a number, got str 'fast'"),
        (["--lr", "-1"], "optim.lr=-1.0: must be > 0"),
        (["--image-size", "10"], "image height 10 is not divisible by patch size 4"),
        (["--data", "no/such/folder"], "no/such/folder"),
        (["--recipe", "paper-train"], "unknown recipe 'paper-train'"),
        (["--config", "missing.yaml"], "config file 'missing.yaml' does not exist"),
    ],
)
def test_bad_input_is_one_line_before_training(extra, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *TINY_FLAGS, "--out", str(tmp_path / "out"), *extra]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("vitlab train: error: ") and message in error and "\n" not in error
    assert not (tmp_path / "out" / "checkpoints").exists()


@pytest.mark.unit
@pytest.mark.fault("bad-config", kinds=1)
@pytest.mark.parametrize(
    "recipe, flag",
    [("demo", "--epochs"), ("small-data", "--epochs"), ("keras-example", "--steps"), ("small-data", "--steps")],
)
def test_zero_length_names_its_flag_whatever_the_recipe_sets(recipe, flag, tmp_path, capsys):
    assert main(["train", "--recipe", recipe, "--data", "digits", "--out", str(tmp_path / "out"), flag, "0"]) == 2
    key = "schedule." + flag.removeprefix("--")
    assert capsys.readouterr().err.strip() == f"vitlab train: error: {flag}: {key}=0: must be > 0"


@pytest.mark.integration
@pytest.mark.fault("bad-input", kinds=2)
def test_zero_batch_size_for_predict_and_eval_is_one_line(trained, tmp_path, capsys):
    image = write_digit_samples(tmp_path, 1)[0]
    for command in (
        ["predict", "--ckpt", str(trained), str(image)],
        ["eval", "--ckpt", str(trained), "--out", str(tmp_path / "e.json")],
    ):
        assert main([*command, "--batch-size", "0"]) == 2
        assert capsys.readouterr().err.strip() == f"vitlab {command[0]}: error: --batch-size must be >= 1, got 0"


@pytest.mark.unit
def test_finetune_needs_a_checkpoint(capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--data", "digits", "--out", "x"])
    assert "--init" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigterm_writes_a_checkpoint_that_resume_continues(tmp_path):
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "vitlab",
        "train",
        *TINY_FLAGS,
        "--out",
        str(out),
        "--steps",
        "300",
        "--eval-every",
        "100",
        "--set",
        "run.log_every=10",
    ]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in process.stderr:  # log lines: "step 10/300 ..." (stderr is not a terminal)
        lines.append(line)
        if line.startswith("step 30/300"):
            process.send_signal(signal.SIGTERM)
            break
    _, rest = process.communicate(timeout=120)
    assert process.returncode == 143, "".join(lines) + rest
    message = [line for line in rest.splitlines() if "stopped by SIGTERM" in line]
    assert message and "--resume" in message[0]
    stopped_at = int(message[0].split("at step ")[1].split(";")[0])
    assert 30 <= stopped_at < 300 and (out / "checkpoints" / f"step-{stopped_at:08d}.pt").is_file()

    started = time.perf_counter()
    finished = subprocess.run(command + ["--resume"], capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    assert f"resuming {out} from step {stopped_at}" in finished.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 300 and summary["wall_time_s"] < time.perf_counter() - started + 120
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [100, 200, 300]
