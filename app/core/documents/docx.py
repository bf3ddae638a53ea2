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
from typing import TYPE_CHECKING, Final

from app.core.documents.builder import BlockBuilder
from app.core.documents.messages import human_size, short_reason
from app.core.documents.model import BlockKind, DocumentError, Limits, Parsed

if TYPE_CHECKING:
    from docx.styles.style import BaseStyle
    from docx.table import Table
    from docx.text.paragraph import Paragraph

MAIN_PART: Final = "word/document.xml"
_CENTRAL_DIRECTORY_SIGNATURE: Final = b"PK\x01\x02"
_READ_BLOCK: Final = 64 * 1024
_RATIO_FLOOR: Final = 1024 * 1024  # small entries may compress well; only big ones can bomb
_HEADING_STYLE = re.compile(r"heading\s*(\d+)", re.IGNORECASE)
_STYLE_DEPTH: Final = 8  # how far up the base-style chain a heading or list style is looked for


def parse_docx(data: bytes, *, name: str, limits: Limits) -> Parsed:
    check_container(data, name=name, limits=limits)
    import docx
    from docx.table import Table

    try:
        document = docx.Document(io.BytesIO(data))
        builder = BlockBuilder()
        for item in document.iter_inner_content():
            if isinstance(item, Table):
                builder.add(BlockKind.TABLE, _table_text(item))
            else:
                kind, level = _paragraph_kind(item)
                builder.add(kind, item.text, level)
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
        for entry in entries:
            inflated = _inflate(archive, entry, inflated, name=name, limits=limits)


def _inflate(
    archive: zipfile.ZipFile, entry: zipfile.ZipInfo, so_far: int, *, name: str, limits: Limits
) -> int:
    """Inflate one entry in blocks, counting real output against the caps; return the total."""
    if entry.is_dir():
        return so_far
    read = 0
    try:
        with archive.open(entry) as stream:
            while block := stream.read(_READ_BLOCK):
                read += len(block)
                if so_far + read > limits.docx_max_uncompressed:
                    raise DocumentError(_too_big(name, so_far + read, limits, actual=True))
                _check_ratio(name, entry, read, limits)
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


def _paragraph_kind(paragraph: Paragraph) -> tuple[BlockKind, int]:
    style: BaseStyle | None = paragraph.style
    for _ in range(_STYLE_DEPTH):
        if style is None:
            break
        style_name = style.name or ""
        if style_name.lower() == "title":
            return BlockKind.HEADING, 1
        heading = _HEADING_STYLE.fullmatch(style_name.strip())
        if heading:
            return BlockKind.HEADING, min(max(int(heading.group(1)), 1), 6)
        if style_name.lower().startswith("list"):
            return BlockKind.LIST, 0
        style = getattr(style, "base_style", None)
    p_pr = paragraph._p.pPr
    if p_pr is not None and p_pr.numPr is not None:
        return BlockKind.LIST, 0
    return BlockKind.PARAGRAPH, 0


def _table_text(table: Table) -> str:
    """Rows by newline, cells by tab; a merged cell's text appears once."""
    rows: list[str] = []
    for row in table.rows:
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            if cell._tc is previous:
                continue
            previous = cell._tc
            cells.append(" ".join(cell.text.split()))
        if any(cells):
            rows.append("\t".join(cells))
    return "\n".join(rows)
