"""Reading the small text files vitlab is given (config.json, run.yaml, `--set` values) with bounds on what they cost.

A config is a few kilobytes. Without bounds, a config.json that is a link to /dev/urandom is read
until memory runs out, a FIFO blocks forever, deep nesting overflows the parser's stack, and a
YAML "billion laughs" document of a few hundred bytes expands through aliases into gigabytes.
Each of these is one ValueError naming the file here; callers turn it into their own error type.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from vitlab.bounded_read import read_bounded
from vitlab.errors import ConfigError, RefusedFileError

MAX_TEXT_BYTES = 16 * 2**20  # an HF config with ImageNet-21k's id2label is under 1 MiB


class TextFileError(ValueError):
    """A text file that is too large, not a regular file, not decodable or too deeply nested."""


def read_text(path: str | Path, limit: int = MAX_TEXT_BYTES) -> str:
    """The file's text, refusing anything but a regular file (links are followed) of at most `limit` bytes."""
    path = Path(path)
    try:  # FileNotFoundError goes to the caller
        data = read_bounded(path, limit, "a text file")
    except RefusedFileError as error:
        raise TextFileError(str(error)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TextFileError(f"{path}: not UTF-8 text (byte {error.start})") from None


def _refuse_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object hook: a key given twice is an error (json keeps the last one without a word)."""
    document = dict(pairs)
    if len(document) < len(pairs):
        repeated = next(key for index, (key, _) in enumerate(pairs) if key in dict(pairs[:index]))
        raise json.JSONDecodeError(f"key {repeated!r} appears twice", "", 0)
    return document


def read_json(path: str | Path, limit: int = MAX_TEXT_BYTES) -> Any:
    """A JSON document, bounded in size and nesting (json's recursion limit is caught), each key once."""
    text = read_text(path, limit)
    try:
        return json.loads(text, object_pairs_hook=_refuse_repeated_keys)
    except json.JSONDecodeError as error:
        raise TextFileError(f"{path}: not valid JSON ({error})") from None
    except RecursionError:
        raise TextFileError(f"{path}: JSON nested too deeply") from None


class NoAliasLoader(yaml.SafeLoader):
    """yaml.SafeLoader without aliases, each key once. An alias (`*name`) repeats a node without copying
    it in the file, so a few nested aliases expand to billions of nodes; vitlab's own run.yaml never
    holds one. A key given twice would keep its last value without a word."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(f"line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not allowed")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            seen: list[Any] = []
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    raise yaml.YAMLError(f"line {key_node.start_mark.line + 1}: key {key!r} appears twice")
                seen.append(key)
        return super().construct_mapping(node, deep)


def load_yaml(text: str, source: str) -> Any:
    """YAML text without aliases; errors and deep nesting are one TextFileError naming `source`."""
    try:
        return yaml.load(text, Loader=NoAliasLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        raise TextFileError(f"{source}: not valid YAML ({error})".replace("\n", " ")) from None
    except RecursionError:
        raise TextFileError(f"{source}: YAML nested too deeply") from None


def read_yaml(path: str | Path, limit: int = MAX_TEXT_BYTES) -> Any:
    return load_yaml(read_text(path, limit), str(path))


def read_config(path: str | Path) -> Any:
    """A YAML config file (`--config`, a run.yaml): a missing file is named, any other problem is a ConfigError."""
    path = Path(path)
    try:
        return read_yaml(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"config file {str(path)!r} does not exist") from None
    except TextFileError as error:
        raise ConfigError(str(error)) from None


def parse_assignment(text: str) -> tuple[str, Any]:
    """ "optim.lr=1e-3" -> ("optim.lr", 0.001): `--set KEY=VALUE`, the value read as YAML (numbers, lists, null)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. optim.lr=0.001")
    try:
        value = load_yaml(raw, "--set") if raw.strip() else ""
    except TextFileError:
        value = raw
    return key.strip(), value
