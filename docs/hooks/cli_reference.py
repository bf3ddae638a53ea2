"""MkDocs hook: the command-line reference, written from contextlens-cli's own parser.

At every build, ``app.cli.main.build_parser()`` is walked: each subcommand (and each of theirs)
becomes a section with its usage, its description and a table of its arguments, so the page
says what the installed command takes and cannot drift from it.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
PAGE = "cli-reference.md"
WIDTH = 100  # the usage lines' width, whatever the terminal building the site
_SPECIAL = re.compile(r"([\\*_\[\]<>|])")


def _escape(text: str) -> str:
    """Markdown-safe text for a table cell; `code spans` are kept as they are."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # the even parts lie outside code spans
        parts[i] = _SPECIAL.sub(r"\\\1", parts[i])
    return "`".join(parts).replace("|", "\\|").replace("\n", " ")


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
    """(name, one-line help) for each subcommand of ``parser``, in the order it lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                yield choice.dest, choice.help or ""


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
    tuple[tuple[str, ...], str, argparse.ArgumentParser]
]:
    """Every subcommand below ``parser``, depth first: (words after the program, help, parser)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, summary in _subcommands(parser):
                child = action.choices[name]
                yield (*path, name), summary, child
                yield from walk(child, (*path, name))


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = parser.formatter_class(prog=parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser.formatter_class(prog=parser.prog, width=WIDTH)
    rows = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            continue  # each has a section of its own
        if action.option_strings:
            metavar = ""
            if action.nargs != 0:
                metavar = " " + formatter._format_args(action, action.dest.upper())
            names = ", ".join(f"`{option}{metavar}`" for option in action.option_strings)
        else:
            names = f"`{formatter._metavar_formatter(action, action.dest)(1)[0]}`"
        text = formatter._expand_help(action) if action.help else ""
        if action.required and action.option_strings:
            text = f"(required) {text}"
        rows.append(f"| {names} | {_escape(text)} |")
    return ["| argument | meaning |", "|---|---|", *rows] if rows else []


def _anchor(words: tuple[str, ...]) -> str:
    return "-".join(words)


def render(parser: argparse.ArgumentParser) -> str:
    commands = list(walk(parser))
    lines = [
        "# CLI reference",
        "",
        "Every `contextlens-cli` command and what it takes, written from the command's own "
        "parser (`app/cli/main.py`, `build_parser`) when the site is built. "
        "`contextlens-cli COMMAND --help` prints the same. How the commands are used, their "
        "JSON output and their exit codes: [the command line](command-line.md).",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    for words, summary, _ in commands:
        lines.append(f"| [`{' '.join(words)}`](#{_anchor(words)}) | {_escape(summary)} |")
    for words, summary, child in commands:
        lines += ["", f"## {' '.join(words)} {{#{_anchor(words)}}}", ""]
        lines += ["```text", _usage(child), "```", ""]
        description = child.description or summary[:1].upper() + summary[1:]
        if description:
            lines += [_escape(description), ""]
        lines += _arguments(child)
    return "\n".join(lines) + "\n"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from app.cli.main import build_parser  # noqa: PLC0415 (the checkout on the path first)

    files.append(File.generated(config, PAGE, content=render(build_parser())))
    return files
