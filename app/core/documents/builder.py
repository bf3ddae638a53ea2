"""Text assembled from extracted blocks (HTML, DOCX): one blank line between blocks.

Formats that are not plain text are rebuilt as text, and the offsets of each block are recorded
as it is appended, so blocks and text can never disagree.
"""

from __future__ import annotations

from app.core.documents.decoding import strip_surrogates
from app.core.documents.model import Block, BlockKind, Parsed

BLOCK_SEPARATOR = "\n\n"


class BlockBuilder:
    def __init__(self) -> None:
        self._parts: list[str] = []
        self._blocks: list[Block] = []
        self._length = 0

    def add(self, kind: BlockKind, text: str, level: int = 0) -> None:
        """Append one block; blank or whitespace-only text is skipped."""
        text = text.strip("\n")
        if not text or text.isspace():
            return
        # Same length in, same length out: offsets computed here stay valid.
        text, _ = strip_surrogates(text.replace("\x00", "\ufffd"))
        if self._parts:
            self._length += len(BLOCK_SEPARATOR)
        self._blocks.append(Block(kind, self._length, self._length + len(text), level))
        self._parts.append(text)
        self._length += len(text)

    def result(self) -> Parsed:
        return Parsed(text=BLOCK_SEPARATOR.join(self._parts), blocks=tuple(self._blocks))
