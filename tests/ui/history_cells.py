"""The History panel's tree read back for the tests: a row's text and tooltip by column name, its
font, its children, and the top level."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QFont

from app.ui.history_columns import Column
from app.ui.history_panel import HistoryPanel


def row(panel: HistoryPanel, version_id: int) -> QModelIndex:
    """The row of a version, which must be shown."""
    index = panel.item_for(version_id)
    assert index is not None, f"version {version_id} is not shown"
    return index


def text(index: QModelIndex, column: Column) -> str:
    """What the row of ``index`` shows in ``column`` ("" when nothing)."""
    shown = index.siblingAtColumn(column).data(Qt.ItemDataRole.DisplayRole)
    return "" if shown is None else str(shown)


def tip(index: QModelIndex, column: Column) -> str:
    """The tooltip of the row of ``index`` in ``column`` ("" when none)."""
    shown = index.siblingAtColumn(column).data(Qt.ItemDataRole.ToolTipRole)
    return "" if shown is None else str(shown)


def font(index: QModelIndex, column: Column = Column.VERSION) -> QFont:
    """The font the row of ``index`` is drawn with in ``column`` (the view's own when the
    model names none)."""
    named = index.siblingAtColumn(column).data(Qt.ItemDataRole.FontRole)
    return QFont() if named is None else QFont(named)


def children(index: QModelIndex, column: Column = Column.VERSION) -> list[str]:
    """The texts of the rows beneath ``index`` in ``column``, in order."""
    model = index.model()
    first = index.siblingAtColumn(0)
    return [text(model.index(r, 0, first), column) for r in range(model.rowCount(first))]


def top_level(panel: HistoryPanel) -> list[QModelIndex]:
    """The rows of the top level (the first column), in order."""
    model = panel.tree.model()
    return [model.index(r, 0) for r in range(model.rowCount())]
