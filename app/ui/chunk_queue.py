"""The buffer panel's first stage: the document's chunks queued for a run, and their state.

A model that gathers changes into one row insertion and one ``dataChanged`` range per 50 ms, so a
run that queues and evaluates thousands of chunks costs its view a few updates a second. The
panel (:mod:`app.ui.buffer_panel`) feeds it from the run's events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    QTimer,
)

Span = tuple[int, int]
_ModelIndex = QModelIndex | QPersistentModelIndex


class ChunkState(Enum):
    PENDING = "pending"  # queued for a model call, not evaluated yet
    IN_KV = "in KV"  # evaluated: resident in the KV cache for the current call
    DONE = "done"  # the call that read it has finished
    EVICTED = "evicted"  # removed from the KV cache


@dataclass
class _Row:
    number: int  # 0-based, in order of first appearance
    start: int
    end: int
    tokens: int
    state: ChunkState


class ChunkQueueModel(QAbstractTableModel):
    """Chunks of the document and their state; changes reach views in batches (see flush)."""

    FLUSH_MS = 50

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._rows: list[_Row] = []  # what views see
        self._new: list[_Row] = []  # queued since the last flush, not inserted yet
        self._by_span: dict[Span, _Row] = {}
        self._dirty: tuple[int, int] | None = None
        self._headers: tuple[str, ...] = ()
        self._labels: dict[ChunkState, str] = {}
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(self.FLUSH_MS)
        self._timer.timeout.connect(self.flush)
        self.retranslate()

    def retranslate(self) -> None:
        """Headers and state names in the language now installed (a model gets no
        ``LanguageChange`` of its own: its panel calls this), and views told so."""
        self._headers = (self.tr("#"), self.tr("Characters"), self.tr("Tokens"), self.tr("State"))
        self._labels = {
            ChunkState.PENDING: self.tr("pending"),
            ChunkState.IN_KV: self.tr("in KV"),
            ChunkState.DONE: self.tr("done"),
            ChunkState.EVICTED: self.tr("evicted"),
        }
        self.headerDataChanged.emit(Qt.Orientation.Horizontal, 0, len(self._headers) - 1)
        if self._rows:
            last = self.index(len(self._rows) - 1, len(self._headers) - 1)
            self.dataChanged.emit(self.index(0, 0), last)

    # ----- changes -----

    def clear(self) -> None:
        self._timer.stop()
        self.beginResetModel()
        self._rows, self._new, self._by_span, self._dirty = [], [], {}, None
        self.endResetModel()

    def queue(self, start: int, end: int, tokens: int) -> None:
        """A chunk queued for a model call (again, when a later call reads it too)."""
        row = self._by_span.get((start, end))
        if row is None:
            row = _Row(len(self._by_span), start, end, tokens, ChunkState.PENDING)
            self._by_span[(start, end)] = row
            self._new.append(row)
            if not self._timer.isActive():
                self._timer.start()
            return
        row.tokens = tokens
        self._set(row, ChunkState.PENDING)

    def set_state(self, span: Span, state: ChunkState) -> None:
        row = self._by_span.get(span)
        if row is not None:
            self._set(row, state)

    def finish(self, spans: Sequence[Span]) -> None:
        """The model call that read ``spans`` has ended: those still in KV are done."""
        for span in spans:
            row = self._by_span.get(span)
            if row is not None and row.state is ChunkState.IN_KV:
                self._set(row, ChunkState.DONE)

    def finish_all(self) -> None:
        for row in self._by_span.values():
            if row.state is ChunkState.IN_KV:
                self._set(row, ChunkState.DONE)

    def _set(self, row: _Row, state: ChunkState) -> None:
        if row.state is state:
            return
        row.state = state
        if row.number < len(self._rows):  # rows not inserted yet carry their state with them
            lo, hi = self._dirty or (row.number, row.number)
            self._dirty = (min(lo, row.number), max(hi, row.number))
        if not self._timer.isActive():
            self._timer.start()

    def flush(self) -> None:
        """Tell views what changed: one insertion of the new rows, one range of changed rows."""
        self._timer.stop()
        if self._new:
            first = len(self._rows)
            self.beginInsertRows(QModelIndex(), first, first + len(self._new) - 1)
            self._rows.extend(self._new)
            self._new = []
            self.endInsertRows()
        if self._dirty is not None:
            lo, hi = self._dirty
            self._dirty = None
            self.dataChanged.emit(self.index(lo, 0), self.index(hi, len(self._headers) - 1))

    # ----- reading -----

    def states(self) -> list[tuple[int, int, ChunkState]]:
        """Every chunk (also those not shown yet) as (start, end, state), in queue order."""
        return [(r.start, r.end, r.state) for r in self._by_span.values()]

    def span_at(self, row: int) -> Span | None:
        return (self._rows[row].start, self._rows[row].end) if 0 <= row < len(self._rows) else None

    def rowCount(self, parent: _ModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: _ModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._headers)

    def data(self, index: _ModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        row, col = self._rows[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return (
                str(row.number + 1),
                f"{row.start:,}–{row.end:,}",
                f"{row.tokens:,}",
                self._labels[row.state],
            )[col]
        if role == Qt.ItemDataRole.TextAlignmentRole and col != 3:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> object:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self._headers[section]
        return None
