"""The good sample documents in tests/data (file name → the format it loads as) and what every
loaded document must hold, whatever its format (tests/core/test_documents.py and
tests/core/test_documents_hostile.py)."""

from __future__ import annotations

from pathlib import Path

from app.core.documents import Block, BlockKind, Document

DATA = Path(__file__).resolve().parents[1] / "data"

GOOD = {
    "chinese-gbk.txt": "text",
    "chinese-big5.txt": "text",
    "chinese-utf16.txt": "text",
    "french-cp1252.txt": "text",
    "latin-mixed.txt": "text",
    "sample.md": "markdown",
    "sample.py": "code",
    "sample.html": "html",
    "chinese-gbk-meta.html": "html",
    "sample.pdf": "pdf",
    "sample.docx": "docx",
}


def check_invariants(doc: Document) -> None:
    """What every caller relies on, whatever the format."""
    previous_end = 0
    for block in doc.blocks:
        assert isinstance(block, Block)
        assert previous_end <= block.start < block.end <= len(doc.text), block
        assert not doc.text[block.end - 1].isspace()
        if block.kind is not BlockKind.CODE:  # code keeps its first line's indentation
            assert not doc.text[block.start].isspace()
        if block.kind is BlockKind.HEADING:
            assert 1 <= block.level <= 6
        else:
            assert block.level == 0
        previous_end = block.end
    if doc.pages:
        assert doc.pages[0][0] == 0 and doc.pages[-1][1] == len(doc.text)
        for (_, end), (start, _) in zip(doc.pages, doc.pages[1:], strict=False):
            assert end == start
    assert not any("\ud800" <= ch <= "\udfff" for ch in doc.text)
    doc.text.encode("utf-8")  # no lone surrogates, or this raises

