"""The documentation people read: README.md stays short and its links lead somewhere, and the
site (mkdocs.yml, docs/) builds in strict mode with the user guide the app shows and a CLI
reference that names every command the parser has."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli.main import build_parser

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
README_MOST_LINES = 250
# [text](target) and ![alt](target), with an optional "title"
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def _links(markdown: str) -> list[str]:
    """Every link and image target outside fenced code blocks."""
    return LINK.findall(FENCE.sub("", markdown))


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension gives a heading (its default slugify)."""
    text = re.sub(r"\s*\{#([^}]+)\}\s*$", "", heading).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(markdown: str) -> set[str]:
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", FENCE.sub("", markdown), re.M)
    return {_slug(h) for h in headings}


@pytest.mark.unit
def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines < README_MOST_LINES, f"README.md has {lines} lines; the rest goes to docs/"


@pytest.mark.unit
def test_every_relative_link_of_the_readme_leads_to_a_file_and_its_anchor() -> None:
    broken = []
    for target in _links(README.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # https://…, mailto:…, and the README's own headings
        path, _, anchor = target.partition("#")
        file = REPO / path
        if not file.exists():
            broken.append(f"{target}: no {path}")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text("utf-8")):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {path}")
    assert not broken, "README.md links nowhere:\n" + "\n".join(broken)


def _commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[str]:
    """Every subcommand below ``parser`` as its words joined by '-' (the reference's anchors)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield "-".join((*words, name))
                yield from _commands(child, (*words, name))


def test_the_site_builds_strictly_with_the_guide_and_every_command(tmp_path: Path) -> None:
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-4000:]

    reference = (site / "cli-reference" / "index.html").read_text(encoding="utf-8")
    commands = sorted(set(_commands(build_parser())))
    assert "run" in commands and "remote-info" in commands
    missing = [c for c in commands if f'id="{c}"' not in reference]
    assert not missing, f"the CLI reference lacks {missing}"

    guide = REPO / "resources" / "help" / "guide.md"
    page = (site / "guide" / "index.html").read_text(encoding="utf-8")
    assert "ContextLens user guide" in page
    pictures = [t for t in _links(guide.read_text(encoding="utf-8")) if t.startswith("guide/")]
    assert len(pictures) >= 10
    for picture in pictures:
        assert (site / picture).is_file(), f"{picture} is not in the built site"
        assert Path(picture).name in page
