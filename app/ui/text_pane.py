"""The document view's text pane: a window of the text, coloured by the plan, marked by chunk.

A ``QTextDocument`` of a whole long text is what makes large documents slow (filling one with
50 MB takes 10 s of Qt calls, its layouts hundreds of MB), so the pane only ever holds a window
of the text (:func:`window_bounds`): all of it up to ``FULL_CHARS``, else about
``WINDOW_CHARS`` around what is on screen. A :class:`TextWindow` maps Python offsets of the whole
text to the pane's UTF-16 positions and back (:class:`Offsets`); the highlighter formats a
block from the stretches that meet it, and only blocks on screen are re-highlighted. The view
(:mod:`app.ui.document_view`) moves the window and gives the pane its layers.
"""

from __future__ import annotations

import bisect
import re
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field

from PySide6.QtCore import QEvent, QPoint, Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QHelpEvent,
    QKeyEvent,
    QKeySequence,
    QPainter,
    QPaintEvent,
    QResizeEvent,
    QSyntaxHighlighter,
    QTextBlock,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
)
from PySide6.QtWidgets import QPlainTextDocumentLayout, QPlainTextEdit, QToolTip, QWidget
from shiboken6 import isValid

from app.ui.plan_index import SOURCE
from app.ui.widgets import fixed_font

FULL_CHARS = 1 << 19  # texts up to this size are in the pane whole (~40 ms to build)
WINDOW_CHARS = 1 << 18  # of a longer text, about this much is in the pane (~25 ms to build)
EDGE_CHARS = 1 << 15  # the window moves when the screen comes this close to one of its edges
LINE_SLACK = 1 << 12  # how far a window edge may move to fall at the start of a line
MAX_MARKS = 400  # chunk marks painted per frame at most
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_NON_SPACE = re.compile(r"\S")


class Offsets:
    """Python string offsets to Qt document positions and back.

    Qt counts UTF-16 units, so each character beyond the BMP takes two positions. (``\\r\\n`` is
    shown as `` \\n``, which keeps those one position per character.)
    """

    def __init__(self, text: str) -> None:
        self.astral = [] if text.isascii() else [m.start() for m in _ASTRAL.finditer(text)]
        self.astral_qt = [p + i for i, p in enumerate(self.astral)]

    def to_qt(self, offset: int) -> int:
        return offset + bisect.bisect_left(self.astral, offset) if self.astral else offset

    def to_py(self, position: int) -> int:
        return position - bisect.bisect_left(self.astral_qt, position) if self.astral else position


@dataclass(frozen=True)
class TextWindow:
    """The stretch ``[start, end)`` of the text that the pane holds (Python offsets)."""

    start: int
    end: int
    offsets: Offsets

    def to_pane(self, offset: int) -> int:
        """The pane position of text offset ``offset``, clamped to the window."""
        return self.offsets.to_qt(min(max(offset, self.start), self.end) - self.start)

    def to_py(self, position: int) -> int:
        """The text offset of pane position ``position``."""
        return self.start + self.offsets.to_py(position)

    def holds(self, offset: int) -> bool:
        return self.start <= offset <= self.end


def window_bounds(text: str, centre: int) -> tuple[int, int]:
    """The window of ``text`` around offset ``centre``: all of a short text, else about
    ``WINDOW_CHARS`` with each edge at the start of a line when one is near."""
    n = len(text)
    if n <= FULL_CHARS:
        return 0, n
    start = max(0, min(centre - WINDOW_CHARS // 2, n - WINDOW_CHARS))
    end = min(n, start + WINDOW_CHARS)
    if start > 0 and (newline := text.rfind("\n", max(0, start - LINE_SLACK), start)) >= 0:
        start = newline + 1
    if end < n and (newline := text.find("\n", end, end + LINE_SLACK)) >= 0:
        end = newline + 1
    return start, end


@dataclass
class Layers:
    """What the highlighter paints, in text offsets: disjoint sorted stretches and sources."""

    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)
    source_starts: list[int] = field(default_factory=list)
    source_ends: list[int] = field(default_factory=list)


def _meeting(
    starts: list[int], ends: list[int], pos: int, end: int
) -> Iterator[tuple[int, int, int]]:
    """(index, start, end) of the sorted disjoint stretches that meet ``[pos, end)``, clipped."""
    i = max(0, bisect.bisect_right(starts, pos) - 1)
    while i < len(starts) and starts[i] < end:
        a, b = max(starts[i], pos), min(ends[i], end)
        if b > a:
            yield i, a, b
        i += 1


class _PlanHighlighter(QSyntaxHighlighter):
    """Formats one block from the stretches that intersect it; never sets block states, so
    re-highlighting a block never cascades into the next."""

    def __init__(self, doc: QTextDocument, window: TextWindow) -> None:
        super().__init__(doc)
        self.window = window
        self.layers = Layers()
        self.formats: list[QTextCharFormat] = [QTextCharFormat() for _ in range(6)]

    def highlightBlock(self, text: str) -> None:
        window, layers, formats = self.window, self.layers, self.formats
        pos = self.currentBlock().position()
        start = window.to_py(pos)
        end = start + len(text)
        for i, a, b in _meeting(layers.starts, layers.ends, start, end):
            qa = window.to_pane(a)
            self.setFormat(qa - pos, window.to_pane(b) - qa, formats[layers.kinds[i]])
        for _, a, b in _meeting(layers.source_starts, layers.source_ends, start, end):
            qa = window.to_pane(a)
            self.setFormat(qa - pos, window.to_pane(b) - qa, formats[SOURCE])


def build_document(
    text: str, font: QFont, window: TextWindow
) -> tuple[QTextDocument, _PlanHighlighter]:
    """A plain-text document of the window's ``text`` with the highlighter attached."""
    doc = QTextDocument()
    doc.setUndoRedoEnabled(False)
    doc.setDefaultFont(font)
    doc.setDocumentLayout(QPlainTextDocumentLayout(doc))
    highlighter = _PlanHighlighter(doc, window)  # attached while empty: no full pass is scheduled
    doc.blockSignals(True)  # nobody else listens yet; the highlighter must not run per line
    QTextCursor(doc).insertText(text.replace("\r\n", " \n") if "\r\n" in text else text)
    doc.blockSignals(False)
    return doc, highlighter


class TextPane(QPlainTextEdit):
    """The read-only window of the text: re-highlights blocks as they come on screen, marks
    chunk starts, answers tooltips, and asks for the whole text's ends on Ctrl+Home/End."""

    hovered = Signal(int)  # a pane position under the mouse, or -1
    edge_wanted = Signal(bool)  # the start (False) or the end (True) of the whole text

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
            | Qt.TextInteractionFlag.TextSelectableByKeyboard
        )
        self.setFont(fixed_font())
        self.text_window = TextWindow(0, 0, Offsets(""))
        self.text_length = 0  # of the whole text, of which the pane holds the window
        self.highlighter: _PlanHighlighter | None = None
        self.fresh: set[int] = set()  # block numbers highlighted with the current layers
        self.mark_starts: list[int] = []  # text offsets where chunks start
        self.mark_colour = QColor()
        self.describe = lambda position: ""  # tooltip text for a pane position
        # the refresh after a repaint request, once per turn of the event loop. The pane's own
        # signals reach it through functions that check it is still whole: connected to its
        # bound methods, a scroll or repaint signal sent while the pane was being torn down
        # raised "Slot 'TextPane::' not found" from the event loop.
        self._refresh = QTimer(self)
        self._refresh.setSingleShot(True)
        self._refresh.setInterval(0)
        pane = weakref.ref(self)

        def refresh(*_args: object) -> None:
            alive = pane()
            if alive is not None and isValid(alive):
                alive.refresh_visible()

        def schedule(*_args: object) -> None:
            alive = pane()
            if alive is not None and isValid(alive) and not alive._refresh.isActive():
                alive._refresh.start()

        self._refresh.timeout.connect(refresh)
        self.verticalScrollBar().valueChanged.connect(refresh)
        self.updateRequest.connect(schedule)

    def invalidate(self) -> None:
        """The layers changed: blocks are re-highlighted as they are shown, these now."""
        self.fresh.clear()
        self.refresh_visible()

    def visible_blocks(self) -> list[QTextBlock]:
        """The blocks on screen, the last one perhaps in part."""
        out = []
        block, offset, height = (
            self.firstVisibleBlock(),
            self.contentOffset(),
            self.viewport().height(),
        )
        while (
            block.isValid() and self.blockBoundingGeometry(block).translated(offset).top() <= height
        ):
            out.append(block)
            block = block.next()
        return out

    def last_visible_position(self) -> int:
        """The pane position at the bottom right of the screen."""
        return self.cursorForPosition(
            QPoint(self.viewport().width(), self.viewport().height())
        ).position()

    def refresh_visible(self) -> None:
        """Highlight the blocks on screen that are not yet highlighted with the current layers."""
        if self.highlighter is None or not isValid(self.highlighter):
            return
        for block in self.visible_blocks():
            self.highlight_block(block)

    def highlight_block(self, block: QTextBlock) -> None:
        if self.highlighter is not None and block.blockNumber() not in self.fresh:
            self.fresh.add(block.blockNumber())
            self.highlighter.rehighlightBlock(block)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.refresh_visible()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        window, n = self.text_window, self.text_length
        if event.matches(QKeySequence.StandardKey.MoveToStartOfDocument) and window.start > 0:
            self.edge_wanted.emit(False)
        elif event.matches(QKeySequence.StandardKey.MoveToEndOfDocument) and window.end < n:
            self.edge_wanted.emit(True)
        else:
            super().keyPressEvent(event)

    def paintEvent(self, event: QPaintEvent) -> None:
        super().paintEvent(event)
        if not self.mark_starts:
            return
        first = self.firstVisibleBlock()
        if not first.isValid():
            return
        window = self.text_window
        # a chunk may start at the line end just above, before the whitespace that opens it
        top = window.to_py(max(0, first.position() - 1))
        lo = bisect.bisect_left(self.mark_starts, max(window.start, top))
        hi = bisect.bisect_right(self.mark_starts, window.to_py(self.last_visible_position() + 1))
        painter = QPainter(self.viewport())
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(self.mark_colour)
        cursor = QTextCursor(self.document())
        for offset in self.mark_starts[lo : min(hi, lo + MAX_MARKS)]:
            if not window.holds(offset):
                continue
            cursor.setPosition(self._first_visible_char(window.to_pane(offset)))
            r = self.cursorRect(cursor)
            painter.drawRect(r.left() - 1, r.top(), 2, r.height())  # a bar before the chunk
            painter.drawRect(r.left() - 1, r.top(), 6, 2)  # and a tick, unlike the caret
        painter.end()

    def _first_visible_char(self, position: int) -> int:
        """Chunks usually begin with the whitespace before their first word: mark the word."""
        block = self.document().findBlock(position)
        offset = position - block.position()
        for _ in range(4):  # a few blank lines at most
            if not block.isValid():
                break
            found = _NON_SPACE.search(block.text(), offset)
            if found is not None:
                return block.position() + found.start()
            block, offset = block.next(), 0
        return position

    def viewportEvent(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            position = self.position_at(event.pos())
            text = self.describe(position) if position >= 0 else ""
            if text:
                QToolTip.showText(event.globalPos(), text, self.viewport())
            else:
                QToolTip.hideText()
                event.ignore()
            self.hovered.emit(position)
            return True
        return super().viewportEvent(event)

    def position_at(self, point: QPoint) -> int:
        """The pane position of the character under ``point`` in the viewport, or -1 if none."""
        cursor = self.cursorForPosition(point)  # the nearest gap between two characters
        rect = self.cursorRect(cursor)
        if not rect.top() <= point.y() <= rect.bottom():
            return -1  # below the text
        position = cursor.position()
        if point.x() < rect.left():
            return max(0, position - 1)  # the character before the gap
        if cursor.atBlockEnd() and point.x() > rect.right() + rect.height():
            return -1  # past the end of the line
        return position
