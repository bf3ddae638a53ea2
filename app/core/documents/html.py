"""HTML to readable text with structure, through BeautifulSoup and lxml.

Only what a reader sees is kept (no scripts, styles or head), in document order, one block per
heading, paragraph, list item, preformatted block or table. Blocks are joined by blank lines so
the plain-text chunker sees the same boundaries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from bs4 import BeautifulSoup, NavigableString, PageElement, Tag
from bs4.dammit import EncodingDetector
from bs4.element import PreformattedString, Script, Stylesheet, TemplateString

from app.core.documents.builder import BlockBuilder
from app.core.documents.decoding import canonical_encoding, decode_bytes, strip_surrogates
from app.core.documents.model import BlockKind, DocumentError, Limits, Parsed

_DROPPED: Final = frozenset({"script", "style", "noscript", "template", "head"})
_HEADINGS: Final = {f"h{n}": n for n in range(1, 7)}
_BLOCK_TAGS: Final = frozenset(
    {
        "address",
        "article",
        "aside",
        "blockquote",
        "body",
        "caption",
        "center",
        "dd",
        "details",
        "dialog",
        "dir",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "header",
        "hgroup",
        "hr",
        "html",
        "legend",
        "main",
        "menu",
        "nav",
        "ol",
        "p",
        "section",
        "summary",
        "ul",
    }
)
_NOT_TEXT: Final = (PreformattedString, Script, Stylesheet, TemplateString)
# Declared labels that browsers read as a wider encoding (the WHATWG Encoding Standard's table).
# Latin-1 and ASCII labels are read as Windows-1252 first: that is what pages labelled so contain.
_WIDER: Final = {
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "big5": "big5hkscs",
    "shift_jis": "cp932",
    "euc_kr": "cp949",
}
_READ_AS_CP1252: Final = frozenset({"iso8859-1", "ascii"})
_UTF16_LABELS: Final = frozenset({"utf-16", "utf-16-le", "utf-16-be"})
_LEADING_BLANK_LINES = re.compile(r"\A(?:[^\S\n]*\n)+")
_ASCII_SPACE = re.compile(r"[ \t\n\r\f]+")
# What the HTML tokenizer reads as a start tag: "<" then an ASCII letter. Each makes at most one
# element (the parser adds a handful of its own: html, head, body), so counting them bounds the
# tree before any of it is built.
_START_TAG = re.compile(r"<[A-Za-z]")


def decode_html(data: bytes, *, name: str) -> tuple[str, str, bool]:
    """Decode HTML bytes: a byte-order mark, else the page's ``<meta charset>``, else detection."""
    if not EncodingDetector.strip_byte_order_mark(data)[1]:
        declared = EncodingDetector.find_declared_encoding(data, is_html=True)
        encoding = canonical_encoding(declared) if declared else None
        if encoding in _UTF16_LABELS:  # a page that can say so in ASCII is not UTF-16
            encoding = "utf-8"
        if encoding in _READ_AS_CP1252:
            candidates = ("cp1252", encoding)
        else:
            candidates = (encoding, _WIDER.get(encoding or ""))
        for candidate in candidates:
            if candidate is None:
                continue
            try:
                text = data.decode(candidate)
            except UnicodeDecodeError:
                continue
            text, replaced = strip_surrogates(text)
            return text, candidate, replaced
    return decode_bytes(data, name=name)


def parse_html(text: str, *, name: str = "the page", limits: Limits | None = None) -> Parsed:
    check_elements(text, name=name, limit=(limits or Limits()).html_max_elements)
    soup = BeautifulSoup(text, "lxml")
    walker = _Walker()
    walker.walk(soup)
    return walker.result()


def check_elements(text: str, *, name: str, limit: int) -> None:
    """Refuse markup with more than ``limit`` start tags, before the parser builds anything.

    BeautifulSoup's tree costs about a kilobyte and 16 µs per element whatever the markup says
    (10 million unclosed ``<b>``, 30 MB, would take ~8 minutes and ~10 GB), and a real page,
    however long, has far fewer elements than a million."""
    if text.count("<") <= limit:  # a bound that costs one pass in C
        return
    for seen, _ in enumerate(_START_TAG.finditer(text), start=1):
        if seen > limit:
            raise DocumentError(
                f"{name} holds more than {limit:,} HTML elements, the most ContextLens reads "
                "from one page."
            )


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
