"""What a person sees in the window's text panes, read back for the tests: whether an offset of
the document view is on screen and how it is highlighted, and where the output's linked text is."""

from __future__ import annotations

from collections.abc import Iterator

from PySide6.QtCore import QPoint
from PySide6.QtGui import QTextCursor, QTextFragment

from app.ui.buffer_panel import BufferPanel
from app.ui.document_view import DocumentView


def make_view(qtbot, text: str | None = None) -> DocumentView:
    """A document view as the window sizes it, shown and exposed, holding ``text`` if given."""
    view = DocumentView()
    qtbot.addWidget(view)
    view.resize(900, 700)
    view.show()
    qtbot.waitExposed(view)
    if text is not None:
        view.set_document(text)
    return view


def block_at(view: DocumentView, offset: int):
    return view.text.document().findBlock(view.pane_position(offset))


def is_visible(view: DocumentView, offset: int) -> bool:
    if view.pane_position(offset) < 0:
        return False
    number = block_at(view, offset).blockNumber()
    return number in {b.blockNumber() for b in view.text.visible_blocks()}


def kinds_in_block(view: DocumentView, offset: int) -> set[int]:
    """Which of the view's formats the highlighter gave the block holding ``offset`` (none
    when the pane's window does not hold it)."""
    if view.pane_position(offset) < 0:
        return set()
    formats = view._formats
    found = set()
    for r in block_at(view, offset).layout().formats():
        for kind, fmt in enumerate(formats):
            if r.format == fmt:
                found.add(kind)
    return found


def linked_fragments(panel: BufferPanel, link: str) -> Iterator[QTextFragment]:
    """The fragments of the panel's output linked ``link``, in order."""
    block = panel.output.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            if frag.charFormat().anchorHref() == link:
                yield frag
            it += 1
        block = block.next()


def point_of(panel: BufferPanel, frag: QTextFragment) -> QPoint:
    """The viewport point of the middle of ``frag``, scrolled into view."""
    cursor = QTextCursor(panel.output.document())
    cursor.setPosition(frag.position() + frag.length() // 2)
    panel.output.setTextCursor(cursor)
    panel.output.ensureCursorVisible()
    return panel.output.cursorRect(cursor).center()

