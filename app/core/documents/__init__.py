"""Documents in, text with structure out: the first stage of the input buffer.

``load_document`` turns a file (plain text in any common encoding, Markdown, source code, HTML,
PDF, DOCX) into one ``Document``: the text, where its headings, paragraphs, code, lists and tables
are, and the facts needed to trust it later (size, sha256, encoding, whether decoding lost
bytes). Every input that cannot be loaded ends in a ``DocumentError`` whose message is one
sentence naming the file; the file itself is only ever read.

Each reader bounds its work by what the file can honestly hold (``Limits``). The app reads files
through :func:`app.core.documents.isolated.read_document`, which runs the HTML, PDF and DOCX
readers in a child process that a cancel kills and whose memory is capped.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from app.core.documents.decoding import decode_bytes, strip_surrogates
from app.core.documents.formats import FORMATS, format_for_name, resolve_format
from app.core.documents.messages import short_reason
from app.core.documents.model import (
    Block,
    BlockKind,
    ContentChanged,
    Document,
    DocumentError,
    Limits,
    Parsed,
)
from app.core.documents.reading import check_file, read_file
from app.core.documents.text import structure

__all__ = [
    "Block",
    "BlockKind",
    "Document",
    "DocumentError",
    "Limits",
    "decode_bytes",
    "document_from_text",
    "load_document",
]

_TEXT_FORMATS = ("text", "markdown", "code")
DEFAULT_LIMITS = Limits()


def load_document(
    path: str | os.PathLike[str], *, limits: Limits = DEFAULT_LIMITS, format: str | None = None,
    expect_sha256: str | None = None,
) -> Document:  # fmt: skip
    """Load a file; ``format`` overrides what the contents and the extension say. With
    ``expect_sha256``, bytes that are not those raise ContentChanged before anything parses
    them (a file opened once, then swapped for a hostile one, is never parsed)."""
    if format is not None and format not in FORMATS:
        raise ValueError(f"unknown document format {format!r}; expected one of {FORMATS}")
    file_path = Path(path)
    name = file_path.name or str(file_path)
    check_file(file_path, name, limits.max_bytes)
    by_name = format or format_for_name(file_path, name)
    data = read_file(file_path, name, limits.max_bytes)
    if not data:
        raise DocumentError(f"{name} is empty.")
    size = len(data)
    sha256 = hashlib.sha256(data).hexdigest()
    if expect_sha256 is not None and sha256 != expect_sha256:
        raise ContentChanged.of(name)
    fmt = format or resolve_format(data, by_name, name=name)
    if fmt in _TEXT_FORMATS:
        text, encoding, lossy = decode_bytes(data, name=name)
        del data  # the text is all that is needed now; a 100 MB file must not be held twice
        parsed = Parsed(text, structure(text, fmt), encoding, lossy)
    else:
        parsed = _parse_container(data, fmt, name=name, limits=limits)
    return Document(
        text=parsed.text,
        path=file_path,
        sha256=sha256,
        size=size,
        format=fmt,
        encoding=parsed.encoding,
        lossy=parsed.lossy,
        blocks=parsed.blocks,
        pages=parsed.pages,
    )


def document_from_text(text: str, *, name: str = "untitled", format: str = "text") -> Document:
    """A document from text already in memory (pasted, or made by a test)."""
    if format not in (*_TEXT_FORMATS, "html"):
        raise ValueError(f"text cannot be read as {format!r}; use text, markdown, code or html")
    clean, lossy = strip_surrogates(text)
    data = clean.encode("utf-8")
    if format == "html":
        from app.core.documents.html import parse_html  # noqa: PLC0415 (bs4, lxml: HTML only)

        parsed = parse_html(clean, name=name)
    else:
        parsed = Parsed(clean, structure(clean, format))
    return Document(
        text=parsed.text,
        path=None,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        format=format,
        encoding="utf-8",
        lossy=lossy,
        blocks=parsed.blocks,
        title=name,
    )


def _parse_container(data: bytes, fmt: str, *, name: str, limits: Limits) -> Parsed:
    """HTML, PDF and DOCX: their libraries are imported only when such a file is opened."""
    if fmt == "html":
        from app.core.documents.html import decode_html, parse_html  # noqa: PLC0415 (bs4, lxml)

        text, encoding, lossy = decode_html(data, name=name)
        try:
            parsed = parse_html(text, name=name, limits=limits)
        except (DocumentError, MemoryError):
            raise
        except Exception as exc:  # lxml and BeautifulSoup refuse markup with several types
            raise DocumentError(f"{name} is not readable HTML ({short_reason(exc)}).") from exc
        if not parsed.text:
            raise DocumentError(f"{name} has no visible text.")
        return Parsed(parsed.text, parsed.blocks, encoding, lossy)
    if fmt == "pdf":
        from app.core.documents.pdf import parse_pdf  # noqa: PLC0415 (pypdf: PDF only)

        return parse_pdf(data, name=name, limits=limits)
    from app.core.documents.docx import parse_docx  # noqa: PLC0415 (python-docx: DOCX only)

    return parse_docx(data, name=name, limits=limits)
