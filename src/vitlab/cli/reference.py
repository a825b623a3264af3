"""The reference pages of the documentation site, written from the code they describe: the command
line from the `vitlab` parser (`cli_reference`) and a run's config from its dataclasses and the
option each field declares (`config_reference`). The site's build hook (docs/hooks/reference.py)
calls them, so a new flag or field is documented by declaring it."""

from __future__ import annotations

import argparse
import html
from typing import Any

from vitlab.config_fields import describe, sections
from vitlab.config_options import declared_options


def cli_reference(parser: argparse.ArgumentParser) -> str:
    """Markdown for `parser` and every subcommand under it: a section per command with its usage, its
    description, its options (flags, help, default) and its examples."""
    lines = [
        "# Command line",
        "",
        "Every command and option of `vitlab`, written from its argument parser when the site is built.",
        "",
    ]
    for name, command in commands(parser):
        lines += command_section(name, command)
    return "\n".join(lines).rstrip() + "\n"


def commands(parser: argparse.ArgumentParser, name: str = "vitlab") -> list[tuple[str, argparse.ArgumentParser]]:
    """(`vitlab train`, its parser), ... for `parser` and its subcommands, depth first, in --help's order."""
    found = [(name, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                found += commands(sub, f"{name} {sub_name}")
    return found


def command_section(name: str, parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    usage = formatter._format_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, "").strip()
    lines = [f"## {name}", "", "```text", usage, "```", ""]
    if parser.description:
        lines += [text(parser.description), ""]
    options = [
        action
        for action in parser._actions
        if action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction)
    ]
    if options:
        lines += ["| option | what it does | default |", "|---|---|---|"]
        lines += [option_row(formatter, action) for action in options]
        lines.append("")
    if parser.epilog:
        lines += ["```text", parser.epilog.strip(), "```", ""]
    return lines


def option_row(formatter: argparse.HelpFormatter, action: argparse.Action) -> str:
    if isinstance(action, argparse._SubParsersAction):
        flags = "`COMMAND`"
        what = ", ".join(f"`{choice}`" for choice in action.choices)
    else:
        flags = ", ".join(f"`{spelling}`" for spelling in action.option_strings) or f"`{action.metavar or action.dest}`"
        if action.option_strings and action.nargs != 0:
            flags += f" `{formatter._format_args(action, formatter._get_default_metavar_for_optional(action))}`"
        what = formatter._expand_help(action) if action.help else ""
        if action.choices and not isinstance(action.choices, dict) and "choices" not in what:
            what += " (one of " + ", ".join(f"`{choice}`" for choice in action.choices) + ")"
    default = action.default
    shown = (
        ""
        if default in (None, argparse.SUPPRESS, False) or isinstance(action, argparse._SubParsersAction)
        else f"`{default}`"
    )
    return f"| {flags} | {cell(what)} | {cell(shown)} |"


def config_reference(config_class: type) -> str:
    """Markdown for a config of sections (TrainConfig): a table per section of each field's key, type,
    default, command-line flag and help, as the fields declare them."""
    lines = [
        "# Run configuration",
        "",
        "Every field of a run's configuration, written from its dataclasses when the site is built. Set one with",
        "`--set section.field=value` or in a YAML file given to `--config`; a run writes the resolved whole to",
        "`DIR/run.yaml`. Fields marked *resumable* may change when a run is resumed.",
    ]
    section = None
    for declared in declared_options(config_class):
        here = declared.key.partition(".")[0]
        if here != section:
            section = here
            lines += [
                "",
                f"## {section}",
                "",
                "| key | type | default | flag | what it sets |",
                "|---|---|---|---|---|",
            ]
        option = declared.option
        what = "; ".join(
            part
            for part in (
                option.help,
                option.range and f"range: {option.range.rule()}",
                option.resumable and "*resumable*",
            )
            if part
        )
        flag = ", ".join(f"`{spelling}`" for spelling in option.flags)
        lines.append(
            f"| `{declared.key}` | {cell(describe(declared.annotation))} | {cell(default_of(config_class, declared.key))} "
            f"| {flag} | {cell(what)} |"
        )
    return "\n".join(lines).strip() + "\n"


def api_reference() -> str:
    """Markdown of mkdocstrings blocks, one per name of `vitlab.__all__`, each at the module that defines
    it (the package imports its names lazily, so the definition is where a reader of the source looks)."""
    import vitlab

    lines = [
        "# Python API",
        "",
        "The names `import vitlab` gives, from their docstrings, each documented in the module that defines it",
        "(`vitlab.NAME` is the same object).",
        "",
    ]
    for name in vitlab.__all__:
        value = getattr(vitlab, name)
        lines += [f"::: {value.__module__}.{value.__qualname__}", ""]
    return "\n".join(lines)


def default_of(config_class: type, key: str) -> str:
    section, _, name = key.partition(".")
    return f"`{getattr(sections(config_class)[section](), name)!r}`"


def text(value: Any) -> str:
    return html.escape(str(value), quote=False)


def cell(value: Any) -> str:
    """A table cell: one line, its pipes escaped, and no text that Markdown would read as HTML."""
    return " ".join(text(value).replace("|", "\\|").split())
