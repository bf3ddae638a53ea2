"""Structure of plain text, source code and Markdown as blocks over the unchanged text.

The text itself is never rewritten (offsets must point into what was decoded), so every splitter
here walks the string with compiled patterns and keeps only offsets: a 100 MB file must not turn
into a Python list of its lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from markdown_it import MarkdownIt

from app.core.documents.model import Block, BlockKind

# Separators start with a literal line feed so the regex engine can skip to candidates quickly
# (a leading character class makes it try every position: 35x slower on 100 MB). A CR before the
# LF is whitespace that ``_trim`` removes. Text with CR alone (classic Mac) gets the CR variants.
_BLANK_LINES_LF = re.compile(r"\n(?:[^\S\n]*\n)+")
_BLANK_LINES_CR = re.compile(r"\r(?:[^\S\r]*\r)+")
_LINE_BREAK_LF = re.compile(r"\n")
_LINE_BREAK_CR = re.compile(r"\r")
_NEWLINE = re.compile(r"\r\n?|\n")  # markdown-it's own definition of a line
_NEVER = re.compile(r"(?!)")
_INDENTED_LINE = re.compile(r"^[ \t\u3000]+\S", re.MULTILINE)
_LONG_LINE: Final = 100  # mean characters per line above which a line reads as a paragraph

# Above this size Markdown is split with the cheap line rules below instead of a full parse:
# markdown-it-py parses about 1 MB/s, so a full parse would stall the load by seconds per MB.
MARKDOWN_PARSE_LIMIT: Final = 4 * 1024 * 1024
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$", re.MULTILINE)
_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t].*)?$", re.MULTILINE)

_TOP_LEVEL: Final[dict[str, BlockKind]] = {
    "heading_open": BlockKind.HEADING,
    "paragraph_open": BlockKind.PARAGRAPH,
    "fence": BlockKind.CODE,
    "code_block": BlockKind.CODE,
    "bullet_list_open": BlockKind.LIST,
    "ordered_list_open": BlockKind.LIST,
    "table_open": BlockKind.TABLE,
    "blockquote_open": BlockKind.PARAGRAPH,
    "html_block": BlockKind.PARAGRAPH,
}


def structure(text: str, fmt: str) -> tuple[Block, ...]:
    """Blocks for the text-like formats: ``"text"``, ``"markdown"`` or ``"code"``."""
    if fmt == "markdown":
        return markdown_blocks(text)
    if fmt == "code":
        spans = (
            (_line_start(text, start), end) for start, end in split_paragraphs(text, 0, len(text))
        )
        return tuple(_spans_to_blocks(spans, BlockKind.CODE))
    return tuple(_spans_to_blocks(text_paragraphs(text, 0, len(text)), BlockKind.PARAGRAPH))


def text_paragraphs(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """Paragraphs separated by blank lines, or, in text with no blank line at all, lines that
    read as paragraphs: long ones, or ones that mostly open with an indent.

    (Chinese prose, for one, often puts each paragraph on one line, opened by two ideographic
    spaces, with no blank line between. Short unindented lines are hard-wrapped prose instead:
    their line ends are not paragraph ends.)
    """
    blank_lines, line_break = _separators(text)
    if blank_lines.search(text, start, end) is None:
        newline = "\n" if line_break is _LINE_BREAK_LF else "\r"
        lines = text.count(newline, start, end) + 1
        indented = len(_INDENTED_LINE.findall(text, start, end))
        if (end - start) / lines >= _LONG_LINE or indented * 2 >= lines:
            return split_paragraphs(text, start, end, line_break)
        return split_paragraphs(text, start, end, _NEVER)
    return split_paragraphs(text, start, end, blank_lines)


def split_paragraphs(
    text: str, start: int, end: int, separator: re.Pattern[str] | None = None
) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each run of text between separators, trimmed of outer whitespace."""
    separator = separator or _separators(text)[0]
    pos = start
    for match in separator.finditer(text, start, end):
        span = _trim(text, pos, match.start())
        if span is not None:
            yield span
        pos = match.end()
    span = _trim(text, pos, end)
    if span is not None:
        yield span


def markdown_blocks(text: str) -> tuple[Block, ...]:
    """Headings, paragraphs, code, lists and tables of CommonMark (plus GFM tables)."""
    if len(text) > MARKDOWN_PARSE_LIMIT:
        return _markdown_blocks_by_lines(text)
    line_starts = [0, *(m.end() for m in _NEWLINE.finditer(text))]
    line_starts.append(len(text))
    parser = MarkdownIt("commonmark").enable("table")
    blocks: list[Block] = []
    for token in parser.parse(text):
        kind = _TOP_LEVEL.get(token.type)
        if kind is None or token.level != 0 or token.map is None:
            continue
        first, last = token.map
        span = _trim(
            text,
            line_starts[min(first, len(line_starts) - 1)],
            line_starts[min(last, len(line_starts) - 1)],
        )
        if span is None:
            continue
        level = int(token.tag[1]) if kind is BlockKind.HEADING else 0
        blocks.append(Block(kind, span[0], span[1], level))
    return tuple(_non_overlapping(blocks))


def _markdown_blocks_by_lines(text: str) -> tuple[Block, ...]:
    """Linear-time Markdown structure for huge files: fences, ATX headings, paragraphs."""
    fences = list(_fenced_ranges(text))
    blocks: list[Block] = []
    pos = 0
    for fence_start, fence_end in [*fences, (len(text), len(text))]:
        for match in _ATX_HEADING.finditer(text, pos, fence_start):
            blocks.extend(
                _spans_to_blocks(text_paragraphs(text, pos, match.start()), BlockKind.PARAGRAPH)
            )
            span = _trim(text, match.start(), match.end())
            if span is not None:
                blocks.append(Block(BlockKind.HEADING, span[0], span[1], len(match.group(1))))
            pos = match.end()
        blocks.extend(
            _spans_to_blocks(text_paragraphs(text, pos, fence_start), BlockKind.PARAGRAPH)
        )
        span = _trim(text, fence_start, fence_end)
        if span is not None:
            blocks.append(Block(BlockKind.CODE, span[0], span[1]))
        pos = fence_end
    return tuple(blocks)


def _fenced_ranges(text: str) -> Iterator[tuple[int, int]]:
    """Fenced code blocks: an opening fence to the next closing fence of the same kind."""
    opening: re.Match[str] | None = None
    for match in _FENCE_LINE.finditer(text):
        fence = match.group(1)
        if opening is None:
            if not (fence[0] == "`" and "`" in match.group(2)):  # backticks in an info string
                opening = match
            continue
        opened = opening.group(1)
        if fence[0] == opened[0] and len(fence) >= len(opened) and not match.group(2).strip():
            yield opening.start(), match.end()
            opening = None
    if opening is not None:  # an unclosed fence runs to the end, as in CommonMark
        yield opening.start(), len(text)


def _separators(text: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The blank-line and line-break patterns for this text's line endings."""
    if "\n" not in text and "\r" in text:
        return _BLANK_LINES_CR, _LINE_BREAK_CR
    return _BLANK_LINES_LF, _LINE_BREAK_LF


def _line_start(text: str, start: int) -> int:
    """Back over the indentation before ``start``: a code block keeps its first line's indent."""
    while start > 0 and text[start - 1] in " \t":
        start -= 1
    return start


def _trim(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _spans_to_blocks(spans: Iterator[tuple[int, int]], kind: BlockKind) -> Iterator[Block]:
    for start, end in spans:
        yield Block(kind, start, end)


def _non_overlapping(blocks: list[Block]) -> Iterator[Block]:
    """Sorted blocks with any overlap dropped: a parser quirk must not break the invariant."""
    last_end = 0
    for block in sorted(blocks, key=lambda b: (b.start, b.end)):
        if block.start >= last_end:
            yield block
            last_end = block.end
