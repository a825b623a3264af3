"""Creating what vitlab is told to write: never through a symbolic link, never over an existing file
unless asked.

A path given as an output may already name something: a file the user meant to keep, or a link an
attacker placed so that the write lands in its target. `refuse_existing` says so in one line before
any work. `staged` then has the output written in a fresh hidden folder beside it and moves each
written entry into place at the end: a new name is created with link(2), which fails on anything
already there (O_EXCL's semantics, a link included); with `overwrite`, rename(2) replaces the name
itself, never a link's target. A run that fails leaves nothing at the output's path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from vitlab.errors import RefusedFileError


def refuse_link(path: str | os.PathLike, flag: str = "--out") -> None:
    """Refuse by name an output path that is a symbolic link: a write would land in its target."""
    if os.path.islink(path):
        raise RefusedFileError(
            f"{flag} {os.fsdecode(path)}",
            f"is a symbolic link (to {os.readlink(os.fspath(path))}); vitlab writes no output through a link: name its "
            "target, or another path",
        )


def refuse_existing(path: str | os.PathLike, flag: str = "--out", overwrite: bool = False) -> None:
    """Refuse by name an output path that is a symbolic link, or that exists without `overwrite`
    (an empty folder counts as free: a folder output may be written into it)."""
    path = Path(path)
    refuse_link(path, flag)
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if overwrite or stat.S_ISDIR(info.st_mode) and not any(path.iterdir()):
        return
    kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a file"
    raise RefusedFileError(f"{flag} {path}", f"exists ({kind}); pass --overwrite to replace it, or name another path")


@contextlib.contextmanager
def staged(path: str | os.PathLike, flag: str = "--out", overwrite: bool = False) -> Iterator[Path]:
    """The path to write `path`'s output to (its name, in a hidden folder beside it); on success what
    was written there is moved to `path`'s folder by name, as the module says."""
    path = Path(path)
    refuse_existing(path, flag, overwrite)
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        yield folder / path.name
        for entry in sorted(folder.iterdir()):
            _place(entry, path.parent / entry.name, flag, overwrite)
    except ValueError as error:  # a writer's or checker's refusal names the file as the user gave it
        error.args = tuple(str(arg).replace(str(folder / path.name), str(path)) for arg in error.args)
        raise
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _place(entry: Path, target: Path, flag: str, overwrite: bool) -> None:
    if entry.is_dir():  # a folder output: its files placed one by one, so that an existing folder keeps the rest
        _make_folder(target, flag)
        for child in sorted(entry.iterdir()):
            _place(child, target / child.name, flag, overwrite)
        return
    try:
        if overwrite:
            os.replace(entry, target)  # rename(2): replaces a link itself, never its target
        else:
            _create(entry, target)
    except FileExistsError:
        raise RefusedFileError(
            f"{flag} {target}", "exists; pass --overwrite to replace it, or name another path"
        ) from None
    except IsADirectoryError:
        raise RefusedFileError(f"{flag} {target}", "is a folder; the output is a file") from None


def _create(entry: Path, target: Path) -> None:
    """`entry` at the new name `target`: link(2) fails on anything there, a dangling link too. Where
    the file system has no hard links, a copy opened with O_EXCL and O_NOFOLLOW, which fails alike."""
    try:
        os.link(entry, target, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        with entry.open("rb") as source, open(target, "xb", opener=no_follow) as copy:
            shutil.copyfileobj(source, copy)


def _make_folder(target: Path, flag: str) -> None:
    try:
        target.mkdir()
    except FileExistsError:
        if not stat.S_ISDIR(target.lstat().st_mode):  # a file, or a link (to a folder or not)
            raise RefusedFileError(f"{flag} {target}", "is not a folder; the output is a folder") from None


def no_follow(path: str, flags: int) -> int:
    """An opener for open(): the last part of the path is never followed if it is a link (O_NOFOLLOW)."""
    return os.open(path, flags | os.O_NOFOLLOW, 0o666)


__all__ = ["no_follow", "refuse_existing", "refuse_link", "staged"]
