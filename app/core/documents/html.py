"""HTML to readable text with structure, through lxml's HTML parser (BeautifulSoup's detector
finds the encoding).

Only what a reader sees is kept (no scripts, styles or head), in document order, one block per
heading, paragraph, list item, preformatted block or table. Blocks are joined by blank lines so
the plain-text chunker sees the same boundaries.
"""

from __future__ import annotations

import re
from typing import Any, Final

from bs4.dammit import EncodingDetector
from lxml import etree

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
        candidates: tuple[str | None, str | None]
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
    """The page's readable text and blocks, read as lxml parses it, in one pass.

    No tree is built: lxml's HTML parser (the one BeautifulSoup's "lxml" builder drives, with
    the same options) reports each start tag, end tag and piece of text to :class:`_Reader`,
    which keeps only the open elements and the block being gathered. The text and blocks are
    those BeautifulSoup's tree gave, walked in document order (tests/core/test_documents_hostile.py
    compares the two on every sample and on random markup), at a tenth of the time and without
    the tree's ~1 KB per element."""
    check_elements(text, name=name, limit=(limits or Limits()).html_max_elements)
    # lxml calls only the target methods there are; its stubs want every one, and _Reader has
    # no start_ns or end_ns (HTML has no namespaces): hence the two call-overload ignores.
    reader = _Reader()
    try:
        parser = etree.HTMLParser(target=reader, recover=True, huge_tree=False)  # type: ignore[call-overload]
        _feed(parser, text)
    except (UnicodeDecodeError, LookupError, etree.ParserError):
        # What BeautifulSoup does when lxml refuses a str: the same text again, as UTF-8.
        reader = _Reader()
        parser = etree.HTMLParser(target=reader, recover=True, huge_tree=False,  # type: ignore[call-overload]
                                  encoding="utf8")  # fmt: skip
        _feed(parser, text.encode("utf-8", "surrogatepass"))
    return reader.result()


def _feed(parser: Any, markup: str | bytes) -> None:
    parser.feed(markup)
    parser.close()


def check_elements(text: str, *, name: str, limit: int) -> None:
    """Refuse markup with more than ``limit`` start tags, before the parser sees any of it.

    Reading costs about 4 µs an element here, and a real page, however long, has far fewer
    than a million elements; BeautifulSoup's tree, which this reader replaced, cost ~1 KB and
    ~20 µs an element (10 million unclosed ``<b>``, 30 MB: 432 s and 4.8 GB)."""
    if text.count("<") <= limit:  # a bound that costs one pass in C
        return
    for seen, _ in enumerate(_START_TAG.finditer(text), start=1):
        if seen > limit:
            raise DocumentError(
                f"{name} holds more than {limit:,} HTML elements, the most ContextLens reads "
                "from one page."
            )


# Where BeautifulSoup files a tag's strings under another type (rt and rp: ruby text; script,
# style, template: not text). get_text() of a heading, pre, table or cell keeps only plain
# strings; the walk of the page keeps ruby text too (script, style and template are dropped).
_STRING_CONTAINERS: Final = frozenset({"rt", "rp", "script", "style", "template"})
_ROW, _CELL, _CAPTION, _TABLE, _OTHER = range(5)


class _Reader:
    """lxml's parser target: the walk of BeautifulSoup's tree, done as the events arrive.

    Outside any heading, pre or table ("the flow"), text gathers into the current paragraph
    (or list item) until a block element starts or ends; ``<br>`` breaks its line; head,
    script, style, noscript and template are skipped whole. A heading, pre or table is gathered
    whole (its text as ``get_text()`` gives it; a table as rows of cells) and added when it
    ends."""

    def __init__(self) -> None:
        self.out = BlockBuilder()
        self.inline: list[str | None] = []  # None marks a <br>
        self.list_depth = 0
        # One entry per open element: what its end must do.
        self.ends: list[Any] = []
        self.containers = 0  # open elements that file strings under another type
        self.container_flags: list[bool] = []
        self.skipping = 0  # >0: inside a dropped element, its depth in ``ends``
        self.gather: _Gathered | None = None

    # ----- lxml's target interface -----

    def start(self, tag: str, attrib: Any = None, nsmap: Any = None) -> None:
        name = tag.lower() if isinstance(tag, str) else ""
        container = name in _STRING_CONTAINERS
        self.container_flags.append(container)
        self.containers += container
        if self.skipping:
            self.ends.append(None)
            return
        if self.gather is not None:
            self.gather.start(name)
            self.ends.append(None)
            return
        if name in _DROPPED:
            self.ends.append(None)
            self.skipping = len(self.ends)
            return
        if name == "br":
            self.inline.append(None)
            self.ends.append(None)
            return
        if name in _HEADINGS or name in ("pre", "table"):
            self._flush()
            self.gather = _Gathered(name)
            self.ends.append("gathered")
            return
        if name == "li":
            self._flush()
            self.list_depth += 1
            self.ends.append("li")
            return
        if name in _BLOCK_TAGS:
            self._flush()
            self.ends.append("block")
            return
        self.ends.append(None)

    def end(self, tag: str) -> None:
        if not self.ends:
            return
        depth = len(self.ends)
        what = self.ends.pop()
        self.containers -= self.container_flags.pop()
        if self.skipping:
            if depth == self.skipping:
                self.skipping = 0
            return
        if what == "gathered":
            gathered, self.gather = self.gather, None
            assert gathered is not None
            gathered.add_to(self.out)
        elif self.gather is not None:
            self.gather.end()
        elif what == "li":
            self._flush()
            self.list_depth -= 1
        elif what == "block":
            self._flush()

    def data(self, text: str) -> None:
        if self.skipping:
            return
        if self.gather is not None:
            if not self.containers:
                self.gather.data(text)
            return
        self.inline.append(text)

    def comment(self, text: str) -> None:
        """Comments, doctypes and processing instructions are never text."""

    def doctype(self, *args: Any) -> None:
        pass

    def pi(self, *args: Any) -> None:
        pass

    def close(self) -> None:
        pass

    # ----- what is kept -----

    def result(self) -> Parsed:
        self._flush()
        return self.out.result()

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


class _Gathered:
    """A heading, pre or table being read whole: its plain strings, and for a table its rows.

    A table's rows are the ``tr`` elements inside it with no other table in between; their
    cells, the ``td`` and ``th`` that are their children, each with all the text inside it
    (nested tables' too); a caption row first if the table's first ``caption`` is its own."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.parts: list[str] = []
        self.stack: list[int] = []  # the open elements inside, by role
        self.tables = 0  # open tables inside this one
        self.rows: list[list[str]] = []
        self.open_rows: list[int] = []  # indexes in ``rows`` of the rows still open
        self.cells: list[list[str]] = []  # open cells of this table's rows (may nest)
        self.caption: list[str] | None = None  # the first caption, while it is open
        self.caption_seen = False
        self.caption_text: str | None = None

    def start(self, name: str) -> None:
        if self.name != "table":
            self.stack.append(_OTHER)
            return
        parent = self.stack[-1] if self.stack else None
        if name == "table":
            self.tables += 1
            role = _TABLE
        elif name == "tr" and not self.tables:
            self.rows.append([])
            self.open_rows.append(len(self.rows) - 1)
            role = _ROW
        elif name in ("td", "th") and parent == _ROW:
            self.cells.append([])
            role = _CELL
        elif name == "caption" and not self.caption_seen:
            self.caption_seen = True
            role = _CAPTION if not self.tables else _OTHER
            if role == _CAPTION:
                self.caption = []
        else:
            role = _OTHER
        self.stack.append(role)

    def end(self) -> None:
        role = self.stack.pop()
        if role == _TABLE:
            self.tables -= 1
        elif role == _ROW:
            self.open_rows.pop()
        elif role == _CELL:
            # A cell is its row's child: that row is the innermost one open (a row nested in
            # the cell, without a table in between, has ended before it).
            self.rows[self.open_rows[-1]].append(_collapse("".join(self.cells.pop())))
        elif role == _CAPTION and self.caption is not None:
            self.caption_text = _collapse("".join(self.caption))
            self.caption = None

    def data(self, text: str) -> None:
        if self.name != "table":
            self.parts.append(text)
            return
        for cell in self.cells:
            cell.append(text)
        if self.caption is not None:
            self.caption.append(text)

    def add_to(self, out: BlockBuilder) -> None:
        if self.name == "pre":
            out.add(BlockKind.CODE, _LEADING_BLANK_LINES.sub("", "".join(self.parts)).rstrip())
        elif self.name == "table":
            rows = [] if self.caption_text is None else [self.caption_text]
            rows += ["\t".join(cells) for cells in self.rows if any(cells)]
            out.add(BlockKind.TABLE, "\n".join(rows))
        else:
            out.add(BlockKind.HEADING, _collapse("".join(self.parts)), _HEADINGS[self.name])


def _collapse(text: str) -> str:
    """HTML's white-space collapsing: ASCII whitespace only (U+3000 and no-break spaces stay)."""
    return _ASCII_SPACE.sub(" ", text).strip(" ")
