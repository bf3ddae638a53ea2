"""The loaded document and its structure: plain immutable values, shared by every format.

Offsets are character offsets into ``Document.text`` so the chunker, the token counter and the
output alignment all speak the same coordinates without knowing where the text came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class DocumentError(ValueError):
    """A document that cannot be loaded; ``str(err)`` is one sentence meant for the person."""


class ContentChanged(DocumentError):
    """The file no longer holds the bytes it was opened with (found before parsing them)."""

    @classmethod
    def of(cls, name: str) -> ContentChanged:
        return cls(f"{name} changed on disk since it was opened; open it again.")


class BlockKind(StrEnum):
    HEADING = "heading"
    PARAGRAPH = "paragraph"
    CODE = "code"
    LIST = "list"
    TABLE = "table"


@dataclass(frozen=True, slots=True)
class Block:
    """One structural unit of the text, ``text[start:end]``; the chunker prefers to cut between."""

    kind: BlockKind
    start: int
    end: int
    level: int = 0  # 1..6 for headings, else 0


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps that bound the memory and time a hostile or accidental input can cost."""

    max_bytes: int = 200 * 1024 * 1024
    # Start tags in an HTML page, counted before it is parsed (reading: ~4 µs each).
    html_max_elements: int = 1_000_000
    docx_max_entries: int = 10_000
    docx_max_uncompressed: int = 512 * 1024 * 1024  # declared sizes, and bytes actually read
    docx_max_ratio: float = 100.0  # per entry, for entries large enough to matter
    # XML elements in all the parts together, counted while the archive is checked, before
    # python-docx parses any part (a real document has 10-20 per paragraph).
    docx_max_elements: int = 2_000_000
    pdf_max_pages: int = 10_000
    pdf_max_stream_bytes: int = 256 * 1024 * 1024
    # Text extraction reads every content stream, form and font a page uses, at ~1 MB/s. Their
    # decoded bytes, counted before any page is read (a stream shared by pages that use it the
    # same way counts once), may not exceed the base plus this multiple of the file's size: a
    # real PDF's content is a few times its size at most, a crafted one thousands of times.
    pdf_work_base: int = 4 * 1024 * 1024
    pdf_work_ratio: float = 16.0
    # The address space of the process that reads HTML, PDF and DOCX files (see isolated.py).
    reader_memory_bytes: int = 4 * 1024 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Document:
    text: str
    path: Path | None
    sha256: str  # of the original file bytes (of the UTF-8 text for in-memory documents)
    size: int  # bytes of the original file
    format: str  # "text" | "markdown" | "code" | "html" | "pdf" | "docx"
    encoding: str
    lossy: bool  # some bytes could not be decoded and became U+FFFD
    blocks: tuple[Block, ...]  # sorted, non-overlapping; need not cover all of the text
    pages: tuple[tuple[int, int], ...] = ()  # paginated formats: consecutive ranges covering text
    title: str | None = None  # the name of an in-memory document (pasted text has no path)

    @property
    def name(self) -> str:
        if self.path is not None and self.path.name:
            return self.path.name
        return self.title or "untitled"


@dataclass(frozen=True, slots=True)
class Parsed:
    """What a format reader hands back to the loader, before file facts are attached."""

    text: str
    blocks: tuple[Block, ...]
    encoding: str = "utf-8"
    lossy: bool = False
    pages: tuple[tuple[int, int], ...] = ()
