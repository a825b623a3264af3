"""A mistyped name is one line that names the closest names that exist: commands, flags, choices,
recipes, config keys (--set, --config) and their choices."""

from __future__ import annotations

import pytest

from vitlab.cli import main

pytestmark = pytest.mark.unit

MISTAKES = [
    (["trian", "--data", "digits"], "invalid choice: 'trian'", "(did you mean train?)"),
    (["train", "--lrr", "0.1"], "unrecognized arguments: --lrr 0.1", "--lrr (did you mean --lr?)"),
    (["train", "--device", "cuad"], "invalid choice: 'cuad'", "(did you mean cuda?)"),
    (["train", "--recipe", "smalldata"], "unknown recipe 'smalldata'", "(did you mean small-data?)"),
    (
        ["finetune", "--ckpt", "x", "--recipe", "paper-finetune:cifra10"],
        "no row 'cifra10'",
        "(did you mean cifar10 or cifar100?)",
    ),
    (["train", "--set", "optim.lrr=0.1"], "unknown key 'optim.lrr'", "(did you mean optim.lr?)"),
    (
        ["train", "--set", "optm.weight_decay=0.1"],
        "unknown key 'optm.weight_decay'",
        "(did you mean optim.weight_decay",
    ),
    (["train", "--set", "optim.name=adamm"], "got str 'adamm'", "(did you mean adam or adamw?)"),
    (["train", "--set", "augment.hflp=true"], "unknown key 'augment.hflp'", "(did you mean augment.hflip?)"),
]


def last_error_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The last line of stderr of `vitlab ARGV`, which must fail with exit status 2 (argparse's own
    errors exit; vitlab's are returned)."""
    try:
        code = main(argv)
    except SystemExit as exit:
        code = exit.code
    assert code == 2, argv
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.fault("bad-config", kinds=len(MISTAKES))
@pytest.mark.parametrize(("argv", "error", "hint"), MISTAKES, ids=[" ".join(m[0]) for m in MISTAKES])
def test_a_mistyped_name_is_one_line_naming_the_close_names(argv, error, hint, capsys):
    line = last_error_line([*argv, "--print-config"] if argv[0] != "trian" else argv, capsys)
    assert error in line and hint in line, line


@pytest.mark.fault("bad-config", kinds=1)
def test_a_mistyped_key_in_a_config_file_is_named_with_its_close_name(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text("augment:\n  hflp: true\n")
    line = last_error_line(["train", "--config", str(config), "--print-config"], capsys)
    assert "unknown key 'augment.hflp' (did you mean augment.hflip?)" in line, line


@pytest.mark.fault("bad-config", kinds=1)
def test_a_name_with_nothing_close_gets_no_guess(capsys):
    assert last_error_line(["train", "--zzzzzz", "1"], capsys).endswith("unrecognized arguments: --zzzzzz 1")
