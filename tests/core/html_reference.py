"""The HTML reader as it was before issue 21 (BeautifulSoup's tree, walked), kept for tests only:
tests/core/test_documents_hostile.py checks that the streaming reader in app/core/documents/html.py
gives the same text and blocks on every sample and on random markup."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from bs4 import BeautifulSoup, NavigableString, PageElement, Tag
from bs4.element import PreformattedString, Script, Stylesheet, TemplateString

from app.core.documents.builder import BlockBuilder
from app.core.documents.html import _BLOCK_TAGS, _DROPPED, _HEADINGS
from app.core.documents.model import BlockKind, Parsed

_NOT_TEXT: Final = (PreformattedString, Script, Stylesheet, TemplateString)
_LEADING_BLANK_LINES = re.compile(r"\A(?:[^\S\n]*\n)+")
_ASCII_SPACE = re.compile(r"[ \t\n\r\f]+")


def parse_html(text: str) -> Parsed:
    soup = BeautifulSoup(text, "lxml")
    walker = _Walker()
    walker.walk(soup)
    return walker.result()


@dataclass(frozen=True, slots=True)
class _End:
    """Pushed under an element's children: when popped, the element has ended."""

    list_item: bool


@dataclass
class _Walker:
    """Iterative (not recursive) walk, so deeply nested markup cannot exhaust the stack."""

    out: BlockBuilder = field(default_factory=BlockBuilder)
    inline: list[str | None] = field(default_factory=list)  # None marks a <br>
    list_depth: int = 0

    def walk(self, root: Tag) -> None:
        stack: list[PageElement | _End] = [root]
        while stack:
            node = stack.pop()
            if isinstance(node, _End):
                self._flush()
                self.list_depth -= node.list_item
            elif isinstance(node, NavigableString):
                if not isinstance(node, _NOT_TEXT):
                    self.inline.append(str(node))
            elif isinstance(node, Tag):
                stack.extend(self._visit(node))

    def result(self) -> Parsed:
        self._flush()
        return self.out.result()

    def _visit(self, tag: Tag) -> list[PageElement | _End]:
        """Handle one element; return what to push (children reversed, end marker first)."""
        name = (tag.name or "").lower()
        if name in _DROPPED:
            return []
        if name == "br":
            self.inline.append(None)
            return []
        if name in _HEADINGS:
            self._flush()
            self.out.add(BlockKind.HEADING, _collapse(tag.get_text()), _HEADINGS[name])
            return []
        if name == "pre":
            self._flush()
            code = _LEADING_BLANK_LINES.sub("", tag.get_text()).rstrip()
            self.out.add(BlockKind.CODE, code)
            return []
        if name == "table":
            self._flush()
            self.out.add(BlockKind.TABLE, _table_text(tag))
            return []
        children: list[PageElement | _End] = list(reversed(tag.contents))
        if name == "li":
            self._flush()
            self.list_depth += 1
            return [_End(list_item=True), *children]
        if name in _BLOCK_TAGS:
            self._flush()
            return [_End(list_item=False), *children]
        return children

    def _flush(self) -> None:
        lines: list[list[str]] = [[]]
        for piece in self.inline:
            if piece is None:
                lines.append([])
            else:
                lines[-1].append(piece)
        self.inline.clear()
        text = "\n".join(_collapse("".join(line)) for line in lines).strip()
        self.out.add(BlockKind.LIST if self.list_depth else BlockKind.PARAGRAPH, text)


def _collapse(text: str) -> str:
    """HTML's white-space collapsing: ASCII whitespace only (U+3000 and no-break spaces stay)."""
    return _ASCII_SPACE.sub(" ", text).strip(" ")


def _table_text(table: Tag) -> str:
    """Rows by newline, cells by tab; rows of nested tables stay inside their cell's text."""
    rows: list[str] = []
    caption = table.find("caption")
    if isinstance(caption, Tag) and caption.find_parent("table") is table:
        rows.append(_collapse(caption.get_text()))
    for row in table.find_all("tr"):
        if row.find_parent("table") is not table:
            continue
        cells = [_collapse(c.get_text()) for c in row.find_all(["td", "th"], recursive=False)]
        if any(cells):
            rows.append("\t".join(cells))
    return "\n".join(rows)
