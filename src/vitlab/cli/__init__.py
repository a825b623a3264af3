"""The `vitlab` command: parses arguments and hands over to the parts of the package.

Each command group lives in a module of this package with `register(subparsers)`; the module sets
`func` on its parser. Errors that users cause (bad input, bad config) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import logging
import math
import os
import re
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from vitlab.config_fields import Range, workers_range

if TYPE_CHECKING:
    from vitlab.config_options import Declared

log = logging.getLogger("vitlab")

POSITIVE = Range(0, low_open=True)


class Command(NamedTuple):
    """A `vitlab` command: the module of vitlab.cli whose `register(subparsers)` builds its parser, and
    its line in `vitlab --help`."""

    module: str
    help: str


# Every command, in the order `vitlab --help` lists them. Only the command a command line names has
# its module imported and its parser built in full (build_parser), so that `vitlab --help` and a typo
# import none of what the commands run.
COMMANDS: dict[str, Command] = {
    "models": Command("models", "list the registered models (ViT, hybrid, BiT, Axial-ViT)"),
    "analyze": Command(
        "analyze", "attention rollout, mean attention distance, position-embedding similarity, embedding filters"
    ),
    "fewshot": Command("evaluate_fewshot", "few-shot linear evaluation (closed-form least squares) and a linear probe"),
    "data": Command("data", "make data sets"),
    "bench": Command("bench", "throughput, memory and MFU of vitlab and its peers on the same cases"),
    "export": Command(
        "export", "export a checkpoint to ONNX, torch.export (.pt2), vit_jax .npz, or a timm / transformers folder"
    ),
    "serve": Command("serve", "web page (upload -> top-5 + attention rollout) and POST /predict JSON endpoint"),
    "weights": Command("weights", "the pretrained-weights catalogue (MODEL:TAG names)"),
    "push": Command("push", "upload a run's model folder with its model card to the Hugging Face Hub"),
    "train": Command("train", "train a ViT from scratch"),
    "finetune": Command("train", "fine-tune a checkpoint on new data (paper Sec. 3.2)"),
    "predict": Command("predict", "class probabilities for image files"),
    "demo": Command("demo", "train a small ViT on the built-in digits, evaluate it, predict a few images"),
    "eval": Command("evaluate", "top-1 / top-5 accuracy of a checkpoint on a dataset"),
    "experiment": Command("experiment", "rerun one of the paper's comparisons on your data and budget"),
}


class UserError(Exception):
    """A problem with what the user gave us; printed as one line, no traceback."""


def number(kind: type[int] | type[float], rule: Range) -> Callable[[str], Any]:
    """An argparse type: the flag's text as an int or a float, finite and within `rule`; anything else
    is argparse's error naming the flag, before any work."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
            ) from None
        if not math.isfinite(value) or not rule.holds(value):
            raise argparse.ArgumentTypeError(f"{rule.rule()}{' and finite' if kind is float else ''}, got {text}")
        return value

    parse.__name__ = kind.__name__  # what argparse calls the type
    return parse


def worker_count(low: int = 0) -> Callable[[str], Any]:
    """The argparse type of every --workers flag: at least `low`, at most vitlab's bound from the CPU count."""
    bound = workers_range()
    return number(int, dataclasses.replace(bound, low=low))


def add_checkpoint_argument(parser: argparse.ArgumentParser) -> None:
    """--ckpt, as every command that reads a model spells it, and the memory the model may take."""
    from vitlab.training.options import CKPT_HELP

    parser.add_argument("--ckpt", required=True, metavar="CKPT", help=CKPT_HELP)
    add_memory_argument(parser)


DEVICE_HELP = "where to run the model (default: auto)"
PRECISION_HELP = "the numerics (default auto: bf16 on GPUs with bf16, fp16 on other GPUs, fp32 on CPU)"


def add_runtime_arguments(
    parser: argparse.ArgumentParser,
    *,
    default: str | None = "auto",
    device_help: str | None = None,
    precision_help: str | None = None,
    precision: bool = True,
) -> None:
    """--device and --precision, their choices the one list of each (vitlab.runtime)."""
    from vitlab.runtime import DEVICES, PRECISIONS

    parser.add_argument("--device", choices=DEVICES, default=default, help=device_help or DEVICE_HELP)
    if precision:
        parser.add_argument("--precision", choices=PRECISIONS, default=default, help=precision_help or PRECISION_HELP)


def add_memory_argument(parser: argparse.ArgumentParser) -> None:
    from vitlab.training.options import MEMORY_LIMIT_HELP

    parser.add_argument("--memory-limit", type=number(float, POSITIVE), metavar="GIB", help=MEMORY_LIMIT_HELP)


def add_declared_flag(
    parser: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup, declared: Declared, required: bool = False
) -> None:
    """The flag a config field declares (vitlab.config_options.option): a switch for a bool, the
    choices of a Literal, else a number or a string of the field's type; default None, so that a flag
    left out changes nothing."""
    from vitlab.config_fields import literal_values

    declaration = declared.option
    kind = flag_type(declared.annotation)
    options: dict[str, Any] = {"dest": declared.dest, "default": None, "help": declaration.help or None}
    choices = literal_values(declared.annotation)
    if declaration.const is not None and kind is str:
        options.update(action="store_const", const=declaration.const)
    elif kind is bool:
        options.update(action="store_true")
    elif choices is not None:
        options.update(choices=choices)
    else:
        options.update(type=kind, metavar=declaration.metavar, required=required)
        if declaration.const is not None:
            options.update(nargs="?", const=declaration.const)
    parser.add_argument(*declaration.flags, **options)


def flag_type(annotation: Any) -> type:
    """What a flag of a field of this type parses: bool, int, float or str (the first that is one of
    them, in an optional or a union such as `int | tuple[int, int] | None`)."""
    import typing

    for candidate in typing.get_args(annotation) or (annotation,):
        if candidate in (bool, int, float, str):
            return candidate
    return str


def memory_limit(args: argparse.Namespace) -> int | None:
    """--memory-limit in bytes, or None for the default (vitlab.memory.budget)."""
    gib = getattr(args, "memory_limit", None)
    if gib is not None and not gib > 0:
        raise UserError(f"--memory-limit must be a positive number of GiB, got {gib}")
    return None if gib is None else int(gib * 2**30)


def load_checkpoint(args: argparse.Namespace, **overrides):
    """vitlab.load(--ckpt) within --memory-limit; an unfinished run's folder (or one of its checkpoint
    files) as its newest intact checkpoint's model."""
    from vitlab.training.unfinished import load_model

    return load_model(args.ckpt, memory_limit=memory_limit(args), **overrides)


def writable_folder(path: str | os.PathLike, flag: str = "--out") -> Path:
    """Create the output folder now, so that a file in its place or a read-only parent is one line
    before any work is done, not a traceback after it."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path}: is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise UserError(f"{flag} {path}: cannot write there ({error.strerror or error})") from None
    return path


def writable_file(path: str | os.PathLike, flag: str = "--out") -> Path:
    """As writable_folder, for an output file: its folder is created and must take a file."""
    from vitlab.output_files import refuse_link

    path = Path(path)
    refuse_link(path, flag)
    if path.is_dir():
        raise UserError(f"{flag} {path}: is a folder, not a file")
    writable_folder(path.parent, flag=f"{flag} {path}: its folder")
    return path


class ExamplesFormatter(argparse.RawDescriptionHelpFormatter):
    """Wraps a one-paragraph description as argparse does; prints text of several lines (the epilog
    of examples) line by line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return super()._fill_text(text, width, indent)
        return argparse.HelpFormatter._fill_text(self, text, width, indent)


def with_examples(*commands: str, before: str = "") -> dict[str, Any]:
    """add_parser keywords that end a command's --help with these example command lines, after the
    lines of `before` (printed as they are)."""
    examples = "examples:\n" + "\n".join(f"  {command}" for command in commands)
    return {"epilog": f"{before}\n\n{examples}" if before else examples, "formatter_class": ExamplesFormatter}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `vitlab` parser: every command's in full, or, given `command` ("" for none), that command's
    (and those of its module) in full and the others as their line of help alone."""
    from vitlab.version import __version__

    from .parser import CommandParser

    parser = CommandParser(prog="vitlab", description="The Vision Transformer, end to end.")
    parser.add_argument("--version", action="version", version=f"vitlab {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging and full tracebacks")
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bars for eval, predict, fewshot, analyze and export (shown only on a terminal anyway)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    full = {row.module for name, row in COMMANDS.items() if command is None or name == command}
    registered: set[str] = set()
    for name, row in COMMANDS.items():
        if row.module in full and row.module not in registered:
            importlib.import_module(f"vitlab.cli.{row.module}").register(subparsers)
            registered.add(row.module)
        elif row.module not in full:
            subparsers.add_parser(name, help=row.help)
    return parser


def named_command(argv: list[str]) -> str:
    """The command a command line names (its first word that is one), else ""."""
    return next((word for word in argv if word in COMMANDS), "")


def user_errors() -> tuple[type[BaseException], ...]:
    """Exception types that mean "bad input" rather than "bug in vitlab"."""
    from vitlab.model.config import ConfigError

    errors: list[type[BaseException]] = [UserError, ConfigError, FileNotFoundError, ValueError]
    try:
        from vitlab.weights import CheckpointError

        errors.append(CheckpointError)
    except ImportError:
        pass
    return tuple(errors)


# torch's words when a DataLoader worker process dies: "DataLoader worker (pid 9590) is killed by
# signal: Killed." or "DataLoader worker (pid(s) 9590, 9591) exited unexpectedly". Where the main
# process notices first, the pipe's own error (EOFError, ConnectionResetError) comes instead.
WORKER_DIED = re.compile(
    r"DataLoader worker \(pid(?:\(s\))? ([\d, ]+)\) (is killed by signal: [^.]*|exited unexpectedly)"
)
WORKER_ADVICE = (
    ", most often by the out-of-memory killer; what was written stays (predict --out and train --resume go on "
    "from it); fewer --workers or a smaller --batch-size use less memory"
)


def worker_death(error: BaseException) -> str | None:
    """One line for a DataLoader worker process that died (most often at the hands of the
    out-of-memory killer), or None for any other error."""
    link: BaseException | None = error
    while link is not None:
        match = WORKER_DIED.search(str(link)) if isinstance(link, RuntimeError) else None
        if match:
            return f"a DataLoader worker (pid {match[1]}) {match[2]}{WORKER_ADVICE}"
        link = link.__cause__ or link.__context__
    frames = traceback.walk_tb(error.__traceback__)
    if isinstance(error, (EOFError, ConnectionError)) and any(
        frame.f_code.co_filename.endswith(os.path.join("torch", "utils", "data", "dataloader.py"))
        for frame, _ in frames
    ):
        return f"a DataLoader worker ended while handing over a batch ({type(error).__name__}){WORKER_ADVICE}"
    return None


def missing_working_directory() -> str | None:
    """Why the working directory cannot be used, or None: one that was deleted under the shell makes
    torch's libraries fail to load with "Intel oneMKL FATAL ERROR", which names neither cause nor cure."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return "the working directory no longer exists (deleted after the shell entered it): cd to a folder that does"
    return None


def main(argv: list[str] | None = None) -> int:
    if (missing := missing_working_directory()) is not None:
        print(f"vitlab: error: {missing}", file=sys.stderr)
        return 2
    parser = build_parser(named_command(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(message)s", stream=sys.stderr)
    from vitlab.progress import disable_progress

    disable_progress(args.no_progress)  # each call as its flags say (tests and scripts call main repeatedly)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        result = args.func(args)
        sys.stdout.flush()  # a reader that left shows here, not at exit
    except KeyboardInterrupt:
        print("vitlab: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader left (`vitlab models | head`): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that exiting flushes nowhere
        return 141
    except user_errors() as error:
        if args.verbose:
            raise
        print(f"vitlab {args.command}: error: {error}", file=sys.stderr)
        return 2
    except (RuntimeError, EOFError, ConnectionError) as error:
        # torch's SIGCHLD handler raises its RuntimeError once more, wherever this process is, for each
        # worker that died: quiet it before any Python function runs (calling a builtin runs no handler)
        try:
            chld = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        except ValueError:  # not the main thread, where no handler runs
            chld = None
        died = worker_death(error)
        if died is None or args.verbose:
            if chld is not None:
                signal.signal(signal.SIGCHLD, chld)
            raise
        print(f"vitlab {args.command}: error: {died}", file=sys.stderr)
        return 1
    return int(result or 0)
