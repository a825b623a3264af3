"""Prediction results written as they come, and read back to resume an interrupted run.

`--out FILE.csv` (columns path, status, error, label_1, prob_1, ... label_K, prob_K) or `FILE.jsonl`
(one object a file: {"path", "top": [{"label", "prob"}]} or {"path", "skipped": why}). Beside it,
FILE.options.json records what produced the rows (model fingerprint, top-k, preprocessing, with
--features the file list, ...): a rerun with the same --out skips the files already written when its
options are the same and says what differs otherwise. A last line cut short by the interruption is
dropped and redone (and said); a line that is no row with whole rows after it is damage, refused by
line number. One run at a time writes an --out (and a --features): a second is refused.

A CSV's cells that a spreadsheet would run as formulas (starting with = + - @, OWASP's rule) are
written with a leading quote, unless --raw-csv; the options record which, and resuming reads them back.

`--features FILE.npy` holds one float32 row of pre-logits features per listed file, row i for file i
(the CSV's order); rows of skipped files are NaN. It is written in place, row by row, so memory does
not grow with the file count.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from vitlab.bounded_read import open_regular
from vitlab.errors import RefusedFileError
from vitlab.npy_files import npy_header
from vitlab.output_files import no_follow
from vitlab.runlock import RunLock

from .stream import FileResult

log = logging.getLogger("vitlab")

SUFFIXES = (".csv", ".jsonl")
CSV_CELLS = "csv_cells"  # the option that records whether a CSV's cells are escaped ("escaped") or "raw"


def options_file(out: Path) -> Path:
    return out.with_name(out.name + ".options.json")


def model_fingerprint(model: torch.nn.Module) -> str:
    """sha256 of the parameter names and bytes: the same for the same weights, however loaded."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def file_fingerprint(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


# File names are bytes on Linux: one that is not UTF-8 (b"caf\xe9.jpg") comes from os.listdir with a
# surrogate for each such byte, and goes to the file and back as those same bytes.
NAME_ERRORS = "surrogateescape"


# A cell a spreadsheet would evaluate as a formula starts with one of these (OWASP's CSV injection
# list). An escaped CSV prefixes such a cell with the quote that marks text, and a cell that starts
# with that quote too, so that reading back drops exactly one quote.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")


def spreadsheet_text(cell: str) -> str:
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell


def from_spreadsheet_text(cell: str) -> str:
    return cell[1:] if cell.startswith("'") else cell


def _complete_text(path: Path) -> str:
    """The file's text up to its last newline; a last line without one is cut off the file itself."""
    with open_regular(path, what="a prediction file") as handle:
        data = handle.read()
    end = data.rfind(b"\n") + 1
    if end < len(data):
        _cut(path, end)
    return data[:end].decode("utf-8", NAME_ERRORS)


def _cut(path: Path, size: int) -> None:
    with open(path, "r+b", opener=no_follow) as handle:
        handle.truncate(size)


def _whole_rows(path: Path, rows: list[Any], bad_line: int, rest: str, is_row: Callable[[str], bool]) -> list[Any]:
    """`rows` when what follows them (`rest`, from line `bad_line`) is the last row cut short by an
    interruption: cut off the file, to be predicted again. Should any whole row follow, the file was
    damaged, not interrupted: refused by line, so that no row is lost."""
    if not rest:
        return rows
    following = sum(is_row(line) for line in rest.splitlines()[1:])
    if following:
        raise ValueError(
            f"{path}: line {bad_line} is not a row vitlab writes, yet {following} rows follow it: mend or delete "
            "that line to resume, or pass another --out to start anew"
        )
    log.info("%s: line %d was cut short by the interruption; its file is predicted again", path, bad_line)
    _cut(path, path.stat().st_size - len(rest.encode("utf-8", NAME_ERRORS)))
    return rows


def _csv_rows(path: Path, escaped: bool) -> list[list[str]]:
    """The complete rows of a CSV file, header first, their cells unescaped. A name may hold a newline
    (quoted): a row cut inside such a name ends at a newline yet is not whole; it is cut off too."""
    text = _complete_text(path)
    width, whole, line_number = 0, 0, 1  # characters of `text` in whole rows; the line the next row starts on
    read, lines_read = 0, 0

    def lines():
        nonlocal read, lines_read
        for line in io.StringIO(text, newline=""):
            read += len(line)
            lines_read += 1
            yield line

    rows: list[list[str]] = []
    try:
        for row in csv.reader(lines(), strict=True):  # strict: a quote left open at the end is an error
            if rows and not _is_csv_row(row, width):
                break
            rows.append([from_spreadsheet_text(cell) for cell in row] if escaped and rows else row)
            width, whole, line_number = len(rows[0]), read, lines_read + 1
    except csv.Error:
        pass

    def is_row(line: str) -> bool:
        try:
            row = next(csv.reader([line], strict=True), [])
        except csv.Error:
            return False
        return _is_csv_row(row, width)

    return _whole_rows(path, rows, line_number, text[whole:], is_row)


def _is_csv_row(row: list[str], width: int) -> bool:
    """Whether `row` is one PredictionWriter writes under a header of `width` cells: a predicted file's
    row fills them; a skipped file's row ends after its error."""
    if len(row) < 3:
        return False
    return (row[1] == "ok" and len(row) == width) or (row[1] == "skipped" and len(row) in (3, width))


def _jsonl_rows(path: Path) -> list[dict]:
    """The complete rows of a JSON-lines file (json.dumps escapes every control character: a row is a line)."""
    rows: list[dict] = []
    lines = _complete_text(path).split("\n")
    for number, line in enumerate(lines, 1):
        row = _json_row(line)
        if row is None and line.strip():
            return _whole_rows(path, rows, number, "\n".join(lines[number - 1 :]), lambda x: _json_row(x) is not None)
        if row is not None:
            rows.append(row)
    return rows


def _json_row(line: str) -> dict | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) and isinstance(row.get("path"), str) else None


class PredictionWriter:
    """Appends one row per FileResult to `out`, flushed per batch; `done` holds the paths already there."""

    def __init__(self, out: Path, options: dict[str, Any], topk: int) -> None:
        if out.suffix not in SUFFIXES:
            raise ValueError(f"--out {out}: the file name must end in {' or '.join(SUFFIXES)}")
        self.out, self.topk, self.csv = out, topk, out.suffix == ".csv"
        self.escaped = self.csv and options.get(CSV_CELLS) == "escaped"
        self.done: set[str] = set()
        self.skipped_before = 0
        self.lock = RunLock.beside(out, "--out")  # a second run appending here would predict every file again
        self.lock.acquire()
        with self.lock.released_if_failing():
            self._open(options)

    def _open(self, options: dict[str, Any]) -> None:
        out, meta = self.out, options_file(self.out)
        if out.exists() and out.stat().st_size > 0:
            if not meta.is_file():
                raise ValueError(f"{out} exists without its {meta.name}: not a vitlab prediction file to resume")
            before = json.loads(meta.read_text())
            if self.csv:
                before.setdefault(CSV_CELLS, "raw")  # written before cells were escaped
            differs = [
                f"{key} {before.get(key)!r} then, {options.get(key)!r} now"
                for key in sorted(set(before) | set(options))
                if before.get(key) != options.get(key)
            ]
            if differs:
                hint = "; --raw-csv writes raw cells" if before.get(CSV_CELLS) != options.get(CSV_CELLS) else ""
                raise ValueError(
                    f"{out} was written with other options ({'; '.join(differs)}): pass another --out to start anew"
                    + hint
                )
            self._read_done()
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            meta.write_text(json.dumps(options, indent=1) + "\n")
            out.write_text("")
        self.handle: IO[str] = open(out, "a", newline="", encoding="utf-8", errors=NAME_ERRORS, opener=no_follow)
        if self.csv and out.stat().st_size == 0:
            header = ["path", "status", "error"]
            header += [f"{field}_{k}" for k in range(1, self.topk + 1) for field in ("label", "prob")]
            csv.writer(self.handle).writerow(header)
            self.handle.flush()

    def _read_done(self) -> None:
        if self.csv:
            rows = _csv_rows(self.out, self.escaped)
            if not rows:  # cut before its header was whole: written anew
                return
            header, *rows = rows
            path, status = header.index("path"), header.index("status")
            for row in rows:
                self._seen(row[path], row[status] == "skipped")
        else:
            for record in _jsonl_rows(self.out):
                self._seen(record["path"], "skipped" in record)

    def _seen(self, path: str, skipped: bool) -> None:
        self.done.add(path)
        self.skipped_before += skipped

    def write(self, rows: Sequence[tuple[str, FileResult]]) -> None:
        """(path, result) pairs, in order; flushed so that an interruption loses no finished batch."""
        if self.csv:
            writer = csv.writer(self.handle)
            text = spreadsheet_text if self.escaped else str
            for path, result in rows:
                cells = [text(path), "skipped" if result.skipped else "ok", text(result.skipped or "")]
                for label, prob in result.top or []:
                    cells += [text(label), repr(prob)]
                writer.writerow(cells)
        else:
            for path, result in rows:
                row: dict[str, Any] = {"path": path}
                if result.skipped:
                    row["skipped"] = result.skipped
                else:
                    row["top"] = [{"label": label, "prob": prob} for label, prob in result.top or []]
                self.handle.write(json.dumps(row) + "\n")
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()
        self.lock.release()


class FeatureFile:
    """An .npy of (rows, dim) float32 written row by row in place. `done` files are already predicted
    (a resumed run): their rows are in the existing file of that shape, which must be there."""

    def __init__(self, path: Path, rows: int, dim: int, done: int) -> None:
        shape = (rows, dim)
        self.lock = RunLock.beside(path, "--features")
        self.lock.acquire()
        with self.lock.released_if_failing():
            self._open(path, shape, done)

    def _open(self, path: Path, shape: tuple[int, int], done: int) -> None:
        if done and not path.is_file():  # a new file would give their rows as zeros without a word
            raise ValueError(
                f"--features {path} is missing, yet --out already holds {done} files' rows, whose features "
                "it held: restore it, or start anew with another --out"
            )
        if done:
            try:  # the header first: a file cut short is said so, before any row is written
                found = npy_header(path, "a --features file")
            except RefusedFileError as error:
                raise ValueError(
                    f"--features {error}; --out already holds {done} files' rows, whose features it held: "
                    "restore it, or start anew with another --out"
                ) from None
            if found.shape != shape or found.dtype != np.float32:
                raise ValueError(
                    f"--features {path} holds {found.dtype} {found.shape}, this run writes float32 {shape}: "
                    "pass another --features or --out"
                )
            self.offset = found.offset
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            created = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape)
            self.offset = created.offset  # the header's length; the rows follow
            del created
        self.dim = shape[1]
        self.row_bytes = self.dim * 4
        self.handle = open(path, "r+b", opener=no_follow)

    def write(self, results: Sequence[FileResult]) -> None:
        for result in results:
            row = result.features if result.features is not None else np.full(self.dim, np.nan, np.float32)
            self.handle.seek(self.offset + result.position * self.row_bytes)
            self.handle.write(np.ascontiguousarray(row, dtype=np.float32).tobytes())
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()
        self.lock.release()
