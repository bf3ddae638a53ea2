"""How a window is laid out, read back for the tests: which widgets its layouts place, and which
of them spill out of their parent or overlap a sibling (tests/ui/test_layout_fits.py)."""

from __future__ import annotations

from collections.abc import Iterator

from PySide6.QtCore import QRect
from PySide6.QtWidgets import QLayout, QSplitter, QToolBar, QWidget

from app.ui.main_window import MainWindow


def laid_out(widget: QWidget) -> list[QWidget]:
    """The visible children a layout or a splitter of ``widget`` places."""
    if isinstance(widget, QSplitter):
        found = [widget.widget(i) for i in range(widget.count())]
        return [w for w in found if w.isVisible() and w.width() > 0]
    found: list[QWidget] = []

    def walk(layout: QLayout) -> None:
        for i in range(layout.count()):
            item = layout.itemAt(i)
            if item.widget() is not None:
                found.append(item.widget())
            elif item.layout() is not None:
                walk(item.layout())

    if widget.layout() is not None:
        walk(widget.layout())
    return [w for w in found if w.isVisible()]


def placed(root: QWidget) -> Iterator[tuple[QWidget, list[QWidget]]]:
    """Every visible widget under ``root`` with the children its layout places (toolbars move
    what does not fit into their extension menu, so they are left out)."""
    stack = [root]
    while stack:
        widget = stack.pop()
        if isinstance(widget, QToolBar):
            continue
        children = laid_out(widget)
        yield widget, children
        stack.extend(w for w in widget.findChildren(QWidget) if w.parentWidget() is widget
                     and w.isVisible())  # fmt: skip


def problems(window: MainWindow) -> list[str]:
    found = []
    for parent, children in placed(window):
        inside = parent.rect()
        for child in children:
            if not inside.contains(child.geometry()):
                found.append(f"{name(child)} {rect(child.geometry())} spills out of "
                             f"{name(parent)} {rect(inside)}")  # fmt: skip
        for i, a in enumerate(children):
            for b in children[i + 1:]:
                if a.geometry().intersects(b.geometry()):
                    found.append(f"{name(a)} and {name(b)} overlap in {name(parent)}")
    return found


def name(w: QWidget) -> str:
    return f"{type(w).__name__}({w.objectName() or getattr(w, 'title', lambda: '')() or ''})"


def rect(r: QRect) -> str:
    return f"{r.x()},{r.y()} {r.width()}x{r.height()}"

