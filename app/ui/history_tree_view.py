"""The History tree's view: the versions and sessions of a :class:`HistoryTreeModel`, and how a
person moves through them.

Every reading is shown expanded, each column as wide as its text (the prompt's and the reply's
up to a limit: the whole of each is in its tooltip). Several rows can be selected (Diff takes
two); the versions are asked for and selected by id. A double-click on a version asks to show
it again; keys arriving in the tree with nothing selected (Tab, Ctrl+4) select the current
version, else the first row, so Rollback, Open and Export act on it at once, as after a click.
"""

from __future__ import annotations

from PySide6.QtCore import QItemSelectionModel, QModelIndex, Signal
from PySide6.QtGui import QFocusEvent
from PySide6.QtWidgets import QAbstractItemView, QTreeView, QWidget

from app.services.history import HistoryView
from app.ui.history_columns import Column
from app.ui.history_tree_model import HistoryTreeModel, Kind

PROMPT_COLUMN_MAX = 360  # pixels; the whole prompt is in the tooltip
REPLY_COLUMN_MAX = 420  # pixels; the whole reply is in the tooltip
_Flag = QItemSelectionModel.SelectionFlag


class HistoryTree(QTreeView):
    """The view of ``model`` (its own, as :attr:`history`)."""

    version_activated = Signal(int)  # a version double-clicked: the person asks to see it

    def __init__(self, model: HistoryTreeModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.history = model
        self.setModel(model)
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setAlternatingRowColors(True)
        self.setUniformRowHeights(True)
        self.doubleClicked.connect(self._on_double_clicked)

    def show_view(self, view: HistoryView, *, sessions: bool, select: set[int]) -> None:
        """Show a new reading (``sessions``: every session, each a top row), expanded, with
        the versions ``select`` selected where they are still shown."""
        self.history.set_view(view, sessions=sessions)
        self.expandAll()
        self.fit_columns()  # the current version's row, bold, is the wider one
        self.select_versions(*select)

    def set_current(self, version_id: int | None) -> None:
        """Mark the current version (bold)."""
        self.history.set_current(version_id)
        self.resizeColumnToContents(Column.VERSION)  # a bold "v12" deep in the tree is not elided

    def fit_columns(self) -> None:
        """Each column as wide as its text, the prompt's and the reply's up to a limit."""
        for column in Column:
            self.resizeColumnToContents(column)
        for column, widest in ((Column.PROMPT, PROMPT_COLUMN_MAX),
                               (Column.REPLY, REPLY_COLUMN_MAX)):  # fmt: skip
            self.setColumnWidth(column, min(self.columnWidth(column), widest))

    # ----- selection -----

    def index_for(self, version_id: int) -> QModelIndex | None:
        """The index (first column) of a version's row; None when it is not shown."""
        index = self.history.version_index(version_id)
        return index if index.isValid() else None

    def select_versions(self, *version_ids: int) -> None:
        """Select these versions' rows (those shown) and nothing else; the last is current."""
        selection = self.selectionModel()
        selection.clearSelection()
        for vid in version_ids:
            index = self.history.version_index(vid)
            if index.isValid():
                selection.setCurrentIndex(index, _Flag.NoUpdate)
                selection.select(index, _Flag.Select | _Flag.Rows)

    def selected(self, kind: Kind) -> list[int]:
        """The ids of the selected rows of ``kind``, in the order they are shown."""
        rows = sorted(self.selectionModel().selectedRows(), key=self._place)
        return [ident for index in rows
                if self.history.kind(index) is kind
                and (ident := self.history.ident(index)) is not None]  # fmt: skip

    def _place(self, index: QModelIndex) -> tuple[int, ...]:
        """Where ``index`` is in the tree: its rows from the top, for sorting."""
        rows: list[int] = []
        while index.isValid():
            rows.append(index.row())
            index = index.parent()
        return tuple(reversed(rows))

    def focusInEvent(self, event: QFocusEvent) -> None:
        """Keys arriving with nothing selected select the current version, else the first row:
        Rollback, Open and Export act on it at once, as they would after a click."""
        if not self.selectionModel().hasSelection():
            current = self.history.current
            target = self.history.version_index(current) if current is not None else QModelIndex()
            if not target.isValid():
                target = self.history.index(0, 0)
            if target.isValid():
                self.selectionModel().setCurrentIndex(target, _Flag.ClearAndSelect | _Flag.Rows)
        super().focusInEvent(event)

    def _on_double_clicked(self, index: QModelIndex) -> None:
        ident = self.history.ident(index)
        if self.history.kind(index) is Kind.VERSION and ident is not None:
            self.version_activated.emit(ident)
