"""DOCX text through python-docx, after the ZIP container has been checked by hand.

A DOCX is a ZIP archive, and a ZIP can declare small sizes and inflate to gigabytes. Every entry
is therefore inflated once here, in bounded blocks, counting the bytes that really come out,
before python-docx reads anything; python-docx then reads the very same bytes. Its XML parser
does not resolve external entities (``resolve_entities=False``), so no file or URL is fetched.
"""

from __future__ import annotations

import io
import re
import zipfile
from typing import Any, Final

import docx
from docx.oxml.ns import qn
from docx.oxml.table import CT_Tbl

from app.core.documents.builder import BlockBuilder
from app.core.documents.messages import human_size, short_reason
from app.core.documents.model import BlockKind, DocumentError, Limits, Parsed

MAIN_PART: Final = "word/document.xml"
_CENTRAL_DIRECTORY_SIGNATURE: Final = b"PK\x01\x02"
_READ_BLOCK: Final = 64 * 1024
_RATIO_FLOOR: Final = 1024 * 1024  # small entries may compress well; only big ones can bomb
_HEADING_STYLE = re.compile(r"heading\s*(\d+)", re.IGNORECASE)
_STYLE_DEPTH: Final = 8  # how far up the base-style chain a heading or list style is looked for


def parse_docx(data: bytes, *, name: str, limits: Limits) -> Parsed:
    check_container(data, name=name, limits=limits)
    try:
        document = docx.Document(io.BytesIO(data))
        styles = _StyleKinds(document.styles.element)
        builder = BlockBuilder()
        # The body's own paragraphs and tables, in order (what Document.iter_inner_content
        # yields), read straight from the elements: no proxy objects per paragraph.
        for item in document.element.body.inner_content_elements:
            if isinstance(item, CT_Tbl):
                builder.add(BlockKind.TABLE, _table_text(item))
                continue
            if not len(item):  # <w:p/>: nothing to read, and nothing to look up
                continue
            text = paragraph_text(item)
            if not text or text.isspace():
                continue  # the builder skips blank blocks: their style is never needed
            kind, level = styles.kind_of(item)
            builder.add(kind, text, level)
    except MemoryError:
        raise
    except Exception as exc:  # python-docx reports malformed parts with many exception types
        raise DocumentError(f"{name} is not a valid DOCX file ({short_reason(exc)}).") from exc
    parsed = builder.result()
    if not parsed.text:
        raise DocumentError(f"{name} contains no text.")
    return parsed


def check_container(data: bytes, *, name: str, limits: Limits) -> None:
    """Refuse archives that are not DOCX, or that would inflate past ``limits``."""
    invalid = f"{name} is not a valid DOCX file"
    # Every central-directory record starts with this signature, so the count bounds the
    # entries zipfile would build objects for, before it builds any (a lying end record cannot
    # hide them: zipfile walks the directory by its size, not by the declared count).
    if data.count(_CENTRAL_DIRECTORY_SIGNATURE) > limits.docx_max_entries:
        raise DocumentError(_too_many(name, limits))
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise DocumentError(f"{invalid} (it is not a ZIP archive).") from exc
    with archive:
        entries = archive.infolist()
        if len(entries) > limits.docx_max_entries:
            raise DocumentError(_too_many(name, limits))
        if MAIN_PART not in archive.NameToInfo:
            raise DocumentError(f"{invalid} (it has no {MAIN_PART}).")
        declared = sum(e.file_size for e in entries)
        if declared > limits.docx_max_uncompressed:
            raise DocumentError(_too_big(name, declared, limits))
        for entry in entries:
            _check_ratio(name, entry, entry.file_size, limits)
        inflated = 0
        elements = _Elements()
        for entry in entries:
            inflated = _inflate(archive, entry, inflated, name=name, limits=limits, count=elements)


class _Elements:
    """XML start tags (``<`` then neither ``/``, ``?`` nor ``!``) in what was inflated so far:
    an upper bound on the elements python-docx's parser will build from the parts."""

    def __init__(self) -> None:
        self.seen = 0


def _inflate(
    archive: zipfile.ZipFile,
    entry: zipfile.ZipInfo,
    so_far: int,
    *,
    name: str,
    limits: Limits,
    count: _Elements | None = None,
) -> int:
    """Inflate one entry in blocks, counting real output (bytes, and elements into ``count``)
    against the caps; return the bytes inflated so far."""
    if entry.is_dir():
        return so_far
    count = count or _Elements()
    read = 0
    try:
        with archive.open(entry) as stream:
            while block := stream.read(_READ_BLOCK):
                read += len(block)
                if so_far + read > limits.docx_max_uncompressed:
                    raise DocumentError(_too_big(name, so_far + read, limits, actual=True))
                _check_ratio(name, entry, read, limits)
                # Counted in C; a tag cut by the block's end counts at most once too many.
                count.seen += (
                    block.count(b"<") - block.count(b"</") - block.count(b"<?")
                    - block.count(b"<!")
                )  # fmt: skip
                if count.seen > limits.docx_max_elements:
                    raise DocumentError(
                        f"{name} holds more than {limits.docx_max_elements:,} XML elements, "
                        "the most ContextLens reads from one document."
                    )
    except DocumentError:
        raise
    except (
        zipfile.BadZipFile,
        NotImplementedError,
        RuntimeError,
        OSError,
        EOFError,
        ValueError,
    ) as exc:  # bad CRC, unknown compression, encrypted entry, truncation
        raise DocumentError(f"{name} is not a valid DOCX file ({short_reason(exc)}).") from exc
    return so_far + read


def _check_ratio(name: str, entry: zipfile.ZipInfo, size: int, limits: Limits) -> None:
    if size > _RATIO_FLOOR and size > limits.docx_max_ratio * max(entry.compress_size, 1):
        raise DocumentError(
            f"{name} is not a safe DOCX file: {entry.filename} inflates more than "
            f"{limits.docx_max_ratio:g} times (a ZIP bomb)."
        )


def _too_many(name: str, limits: Limits) -> str:
    return f"{name} holds more archive entries than the limit of {limits.docx_max_entries:,}."


def _too_big(name: str, size: int, limits: Limits, *, actual: bool = False) -> str:
    verb = "inflates to more than" if actual else "would inflate to"
    return (
        f"{name} {verb} {human_size(size)}; "
        f"the limit is {human_size(limits.docx_max_uncompressed)}."
    )


_W: Final = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
# What python-docx's Paragraph.text reads, and how: the runs and hyperlinks that are the
# paragraph's children, in order; in each run, these children (a break is a newline only when it
# breaks the line, not the page or column). Read here with lxml's own iteration: python-docx
# evaluates an XPath expression per paragraph and per run, ~50 µs a paragraph.
_RUN, _HYPERLINK, _TEXT, _BREAK = _W + "r", _W + "hyperlink", _W + "t", _W + "br"
_RUN_PARTS: Final = {
    _W + "cr": "\n",
    _W + "noBreakHyphen": "-",
    _W + "ptab": "\t",
    _W + "tab": "\t",
}
_RUN_CHILDREN: Final = (_TEXT, _BREAK, *_RUN_PARTS)
_BREAK_TYPE: Final = _W + "type"
_PPR, _PSTYLE, _NUMPR, _VAL = _W + "pPr", _W + "pStyle", _W + "numPr", _W + "val"


def paragraph_text(paragraph: Any) -> str:
    """The text of a ``w:p`` element, as python-docx's ``Paragraph.text`` gives it."""
    parts: list[str] = []
    for child in paragraph.iterchildren(_RUN, _HYPERLINK):
        runs = (child,) if child.tag == _RUN else child.iterchildren(_RUN)
        for run in runs:
            for item in run.iterchildren(*_RUN_CHILDREN):
                tag = item.tag
                if tag == _TEXT:
                    parts.append(item.text or "")
                elif tag == _BREAK:
                    if item.get(_BREAK_TYPE, "textWrapping") == "textWrapping":
                        parts.append("\n")
                else:
                    parts.append(_RUN_PARTS[tag])
    return "".join(parts)


_PARAGRAPH_STYLE: Final = "paragraph"
_ON: Final = frozenset({"1", "true", "on"})


class _StyleKinds:
    """Which block a paragraph style makes, worked out once per style.

    python-docx resolves ``paragraph.style`` by searching every style of the document, twice, for
    each paragraph (a thousand styles and a hundred thousand paragraphs: minutes); here the
    styles are indexed by id once and each one's kind is kept. The rules are python-docx's: the
    first style with the id, the last default paragraph style when the id is missing or names no
    paragraph style, base styles by id whatever their type.
    """

    def __init__(self, styles: Any) -> None:
        self._qn = qn
        self._by_id: dict[str, Any] = {}
        self._default: Any = None
        for style in styles.iterchildren(qn("w:style")):
            style_id = style.get(qn("w:styleId"))
            if style_id is not None:
                self._by_id.setdefault(style_id, style)
            if _is_paragraph_style(style, qn) and style.get(qn("w:default")) in _ON:
                self._default = style
        self._kinds: dict[int, tuple[BlockKind, int] | None] = {}

    def kind_of(self, paragraph: Any) -> tuple[BlockKind, int]:
        p_pr = paragraph.find(_PPR)
        p_style = p_pr.find(_PSTYLE) if p_pr is not None else None
        style_id = p_style.get(_VAL) if p_style is not None else None
        style = self._by_id.get(style_id) if style_id else None
        if style is None or not _is_paragraph_style(style, self._qn):
            style = self._default
        found = self._style_kind(style) if style is not None else None
        if found is not None:
            return found
        if p_pr is not None and p_pr.find(_NUMPR) is not None:
            return BlockKind.LIST, 0
        return BlockKind.PARAGRAPH, 0

    def _style_kind(self, style: Any) -> tuple[BlockKind, int] | None:
        key = id(style)  # the elements live as long as the document, so ids stay theirs
        if key in self._kinds:
            return self._kinds[key]
        qn = self._qn
        found: tuple[BlockKind, int] | None = None
        current = style
        for _ in range(_STYLE_DEPTH):
            if current is None:
                break
            name_element = current.find(qn("w:name"))
            style_name = (name_element.get(qn("w:val")) if name_element is not None else "") or ""
            if style_name.lower() == "title":
                found = (BlockKind.HEADING, 1)
                break
            heading = _HEADING_STYLE.fullmatch(style_name.strip())
            if heading:
                found = (BlockKind.HEADING, min(max(int(heading.group(1)), 1), 6))
                break
            if style_name.lower().startswith("list"):
                found = (BlockKind.LIST, 0)
                break
            based_on = current.find(qn("w:basedOn"))
            base_id = based_on.get(qn("w:val")) if based_on is not None else None
            current = self._by_id.get(base_id) if base_id is not None else None
        self._kinds[key] = found
        return found


def _is_paragraph_style(style: Any, qn: Any) -> bool:
    kind: str | None = style.get(qn("w:type"))
    return kind == _PARAGRAPH_STYLE


def _table_text(table: Any) -> str:
    """Rows by newline, cells by tab; a merged cell's text appears once.

    Read from the elements, one pass over the cells: a cell spanning columns is one ``w:tc``
    (python-docx's ``row.cells`` repeats it once per column, ``gridSpan`` times, however large);
    a cell continuing a vertical merge is empty here, its text being in the merge's first row
    (python-docx looks it up row by row, once per continued row)."""
    rows: list[str] = []
    for tr in table.tr_lst:
        cells: list[str] = []
        for tc in tr.tc_lst:
            if tc.grid_span < 1:
                continue  # a cell that spans no column is not shown (python-docx skips it too)
            if tc.vMerge == "continue":
                cells.append("")
            else:
                text = "\n".join(paragraph_text(p) for p in tc.iterchildren(_W + "p"))
                cells.append(" ".join(text.split()))
        if any(cells):
            rows.append("\t".join(cells))
    return "\n".join(rows)
