"""The History tree as a Qt item model: the sessions (when every session is shown) and their
versions, each version beneath the one it was made from.

The model stands over one :class:`HistoryView` (typed rows, read off the GUI thread by
``services.history.read_history``). A new reading resets it (the panel selects and expands
again); the current version and the language change only what is drawn (``dataChanged``), so
what is selected and expanded stays. Every text comes from ``data()``, worded by
:class:`~app.ui.history_columns.HistoryColumns` in the language installed when it is asked.

Each row is a node in a flat list; an index carries its node's place in that list as its
internal id, so ``parent()`` needs no Python object kept alive behind a pointer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import overload

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QObject, QPersistentModelIndex, Qt
from PySide6.QtGui import QFont

from app.services.history import HistoryView, SessionRow, VersionInfo
from app.ui.history_columns import Column, HistoryColumns

_ModelIndex = QModelIndex | QPersistentModelIndex
_TOP = -1  # the parent of a node at the top level
_ROOT = QModelIndex()  # the invisible root: the parent of the top level


class Kind(Enum):
    """What a row stands for."""

    SESSION = "session"
    VERSION = "version"


class ItemRole(IntEnum):
    """The model's own roles, on every cell of a row."""

    KIND = Qt.ItemDataRole.UserRole.value  # the row's Kind, as its value ("session", "version")
    ID = Qt.ItemDataRole.UserRole.value + 1  # the session's or the version's id


@dataclass
class _Node:
    kind: Kind
    ident: int  # the session's or the version's id
    parent: int  # its parent's key (_TOP: none)
    row: int  # its row under its parent
    children: list[int] = field(default_factory=list)  # their keys, in row order


class HistoryTreeModel(QAbstractItemModel):
    """Sessions and versions as a tree; see the module's docstring."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.columns = HistoryColumns(self)
        self._view = HistoryView([], [], {}, {})
        self._sessions: dict[int, SessionRow] = {}
        self._versions: dict[int, VersionInfo] = {}
        self._nodes: list[_Node] = []  # by key
        self._top: list[int] = []  # the keys of the top level, in row order
        self._keys: dict[tuple[Kind, int], int] = {}
        self._compared: set[int] = set()  # versions labelled with their strategy
        self._current: int | None = None

    # ----- what it shows -----

    @property
    def view(self) -> HistoryView:
        """The reading shown."""
        return self._view

    def set_view(self, view: HistoryView, *, sessions: bool) -> None:
        """Show ``view``: with ``sessions`` (every session is shown) each session is a top row
        and its versions are beneath it; without, the versions that have no parent shown are
        the top rows."""
        self.beginResetModel()
        self._view = view
        self._sessions = {s.id: s for s in view.sessions} if sessions else {}
        self._versions = {v.id: v for v in view.versions}
        self._nodes, self._top, self._keys = [], [], {}
        for s in self._sessions.values():
            self._add(Kind.SESSION, s.id, _TOP)
        for v in view.versions:  # creation order: a parent always comes before its children
            holder = self._keys.get((Kind.VERSION, v.parent)) if v.parent is not None else None
            if holder is None:
                holder = self._keys.get((Kind.SESSION, v.session), _TOP)
            self._add(Kind.VERSION, v.id, holder)
        self._compared = compared(view.versions)
        self.endResetModel()

    def _add(self, kind: Kind, ident: int, parent: int) -> None:
        siblings = self._top if parent == _TOP else self._nodes[parent].children
        key = len(self._nodes)
        self._nodes.append(_Node(kind, ident, parent, len(siblings)))
        siblings.append(key)
        self._keys[(kind, ident)] = key

    @property
    def current(self) -> int | None:
        """The current version (bold): the one the next Run branches from."""
        return self._current

    def set_current(self, version_id: int | None) -> None:
        """Mark ``version_id`` current (None: none); the rows it concerns are drawn again."""
        old, self._current = self._current, version_id
        for vid in dict.fromkeys((old, version_id)):
            index = self.version_index(vid) if vid is not None else QModelIndex()
            if index.isValid():
                self._row_changed(index, [Qt.ItemDataRole.FontRole])

    def retranslate(self) -> None:
        """The language changed: every header and cell is drawn again (the texts are worded
        when asked); nothing is read, selected or expanded anew."""
        self.headerDataChanged.emit(Qt.Orientation.Horizontal, 0, len(Column) - 1)
        last = len(Column) - 1
        groups = [(QModelIndex(), self._top)] + [
            (self.createIndex(node.row, 0, key), node.children)
            for key, node in enumerate(self._nodes) if node.children
        ]  # fmt: skip
        for parent, children in groups:
            if children:
                first = self.index(0, 0, parent)
                self.dataChanged.emit(first, first.sibling(len(children) - 1, last))

    def _row_changed(self, index: QModelIndex, roles: list[Qt.ItemDataRole]) -> None:
        self.dataChanged.emit(index.siblingAtColumn(0), index.siblingAtColumn(len(Column) - 1),
                              roles)  # fmt: skip

    # ----- looking up -----

    def version_index(self, version_id: int) -> QModelIndex:
        """The index (first column) of a version's row; invalid when it is not shown."""
        return self._index_of(Kind.VERSION, version_id)

    def session_index(self, session_id: int) -> QModelIndex:
        """The index (first column) of a session's row; invalid when it has none."""
        return self._index_of(Kind.SESSION, session_id)

    def _index_of(self, kind: Kind, ident: int) -> QModelIndex:
        key = self._keys.get((kind, ident))
        return QModelIndex() if key is None else self.createIndex(self._nodes[key].row, 0, key)

    def kind(self, index: _ModelIndex) -> Kind | None:
        node = self._node(index)
        return None if node is None else node.kind

    def ident(self, index: _ModelIndex) -> int | None:
        """The id of the session or the version ``index`` is a row of."""
        node = self._node(index)
        return None if node is None else node.ident

    def version(self, version_id: int) -> VersionInfo | None:
        """A version of the reading shown."""
        return self._versions.get(version_id)

    def _node(self, index: _ModelIndex) -> _Node | None:
        if not index.isValid() or index.model() is not self:
            return None
        key = index.internalId()
        return self._nodes[key] if 0 <= key < len(self._nodes) else None

    def _children(self, parent: _ModelIndex) -> list[int]:
        if not parent.isValid():
            return self._top
        node = self._node(parent)
        return node.children if node is not None and parent.column() == 0 else []

    # ----- QAbstractItemModel -----

    def index(self, row: int, column: int, parent: _ModelIndex = _ROOT) -> QModelIndex:
        siblings = self._children(parent)
        if not (0 <= row < len(siblings) and 0 <= column < len(Column)):
            return QModelIndex()
        return self.createIndex(row, column, siblings[row])

    @overload
    def parent(self) -> QObject | None: ...
    @overload
    def parent(self, child: _ModelIndex) -> QModelIndex: ...
    def parent(self, child: _ModelIndex | None = None) -> QObject | QModelIndex | None:
        if child is None:  # QObject's parent
            return super().parent()
        node = self._node(child)
        if node is None or node.parent == _TOP:
            return QModelIndex()
        return self.createIndex(self._nodes[node.parent].row, 0, node.parent)

    def rowCount(self, parent: _ModelIndex = _ROOT) -> int:
        return len(self._children(parent))

    def columnCount(self, parent: _ModelIndex = _ROOT) -> int:
        return len(Column)

    def data(self, index: _ModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        node = self._node(index)
        if node is None:
            return None
        if role == ItemRole.KIND:
            return node.kind.value
        if role == ItemRole.ID:
            return node.ident
        column = Column(index.column())
        if node.kind is Kind.SESSION:
            s = self._sessions[node.ident]
            if role == Qt.ItemDataRole.DisplayRole:
                return self.columns.session_text(s, column)
            if role == Qt.ItemDataRole.ToolTipRole:
                return self.columns.session_tip(s, column)
            return None
        v = self._versions[node.ident]
        run, state = self._view.last_runs.get(v.id), self._view.states.get(v.id)
        if role == Qt.ItemDataRole.DisplayRole:
            return self.columns.version_text(v, run, state, column,
                                             with_strategy=v.id in self._compared)  # fmt: skip
        if role == Qt.ItemDataRole.ToolTipRole:
            return self.columns.version_tip(v, run, state, column)
        if role == Qt.ItemDataRole.FontRole:
            current, cancelled = v.id == self._current, run is not None and run.cancelled
            if not (current or cancelled):
                return None
            font = QFont()
            font.setBold(current)  # the next Run branches from it
            font.setItalic(cancelled)  # its reply is cut short
            return font
        return None

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> object:
        if (orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole
                and 0 <= section < len(Column)):  # fmt: skip
            return self.columns.header(Column(section))
        return None


def compared(versions: list[VersionInfo]) -> set[int]:
    """The versions of one compare: recorded together (one transaction gives them ids one
    after the other) beneath one parent, the same job under different strategies, so that
    only their strategy tells them apart."""
    out: set[int] = set()
    run: list[VersionInfo] = []
    for v in [*sorted(versions, key=lambda v: v.id), None]:
        if v is not None and run and v.id == run[-1].id + 1 and _job(v) == _job(run[-1]):
            run.append(v)
            continue
        if len({r.strategy for r in run}) > 1:
            out.update(r.id for r in run)
        run = [] if v is None else [v]
    return out


def _job(v: VersionInfo) -> tuple[object, ...]:
    """Where a version stands and what it ran, but its strategy."""
    return v.session, v.parent, v.task, v.prompt, v.model_sha256, v.settings
