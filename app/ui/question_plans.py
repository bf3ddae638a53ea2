"""Several questions at once: their plans side by side, and a box to type them in.

Under `retrieve` each question asked has a plan of its own. :class:`QuestionPlansView` shows
them as a grid: a column per question, a row per part of the document any of them keeps (where
it is, in characters), each cell the part's tokens and rank for the question that keeps it;
a part kept by more than one question is marked in every column that keeps it, each column
says how many of its parts it shares with each other question, and the last row sums up the
tokens each keeps and those kept by more than one. What is shared is worked out by the services
(app/services/question_plans.py); the view only draws it. A double click on a part asks the
window to show it in the document.

:class:`SeveralQuestions` is the small dialog that takes several questions, one per line.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QPlainTextEdit,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.services.question_plans import KeptPart, SideBySide
from app.ui.i18n import FollowsLanguage, strategy_label
from app.ui.widgets import plain_label

SHARED_MARK = "⇄"  # a part another question keeps too
SHARED_COLOR = QColor(255, 190, 0, 70)  # amber, see-through: readable on light and dark
QUESTION_CHARS = 48  # a column's heading shows this much of its question (all of it on hover)
SPAN_ROLE = Qt.ItemDataRole.UserRole  # a cell's (start, end) in the document
SHARED_ROLE = Qt.ItemDataRole.UserRole + 1  # a cell's other questions keeping it (indices)


class QuestionPlansView(FollowsLanguage, QWidget):
    """The plans of several questions side by side (hidden by the window for one question)."""

    part_chosen = Signal(int, int)  # a part double-clicked: its start and end in the document

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._plans: SideBySide | None = None
        self.heading = plain_label()
        self.heading.setWordWrap(True)
        self.table = QTableWidget()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setWordWrap(True)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectItems)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        header.setTextElideMode(Qt.TextElideMode.ElideRight)  # the whole question on hover
        header.setMinimumSectionSize(90)
        self.table.verticalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents)  # fmt: skip
        self.table.cellDoubleClicked.connect(self._chosen)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.heading)
        layout.addWidget(self.table, 1)
        self.retranslate()

    @property
    def plans(self) -> SideBySide | None:
        return self._plans

    def set_plans(self, plans: SideBySide | None) -> None:
        """Show ``plans`` (None: none, the grid empties)."""
        self._plans = plans
        self._fill()

    def retranslate(self) -> None:
        self._fill()

    # ----- drawing -----

    def _fill(self) -> None:
        plans = self._plans
        table = self.table
        table.clear()
        if plans is None or not plans.questions:
            table.setRowCount(0)
            table.setColumnCount(0)
            self.heading.setText(self.tr("Ask several questions under “retrieve” to see "
                                         "their plans side by side."))  # fmt: skip
            return
        n = len(plans.questions)
        rows = plans.rows()
        self.heading.setText(self.tr(
            "{0} questions, each with its plan under {1} ({2:,} tokens of room): {3} "
            "chunk(s), {4:,} tokens, kept by more than one").format(
            n, strategy_label(plans.strategy), plans.budget, len(plans.shared_parts),
            plans.shared_tokens))  # fmt: skip
        table.setColumnCount(n)
        table.setRowCount(len(rows) + 2)  # the shares first, the parts, the totals last
        for i, q in enumerate(plans.questions):
            shown = q.question if len(q.question) <= QUESTION_CHARS else (
                q.question[: QUESTION_CHARS - 1] + "…")  # fmt: skip
            head = QTableWidgetItem(self.tr("Q{0}: {1}").format(i + 1, shown))
            head.setToolTip(q.question)
            table.setHorizontalHeaderItem(i, head)
            table.setItem(0, i, self._item(self._shares(i, q.shares, len(q.parts))))
        table.setVerticalHeaderItem(0, QTableWidgetItem(self.tr("Shared")))
        for r, ((start, end), cells) in enumerate(rows, start=1):
            table.setVerticalHeaderItem(r, QTableWidgetItem(f"{start:,}–{end:,}"))
            for i, part in enumerate(cells):
                if part is not None:
                    table.setItem(r, i, self._part(part))
        last = len(rows) + 1
        table.setVerticalHeaderItem(last, QTableWidgetItem(self.tr("Total")))
        for i, q in enumerate(plans.questions):
            total = self._item(self.tr("{0:,} tokens kept, {1:,} shared").format(
                q.kept_tokens, q.shared_tokens))  # fmt: skip
            font = total.font()
            font.setBold(True)
            total.setFont(font)
            table.setItem(last, i, total)
        table.resizeRowsToContents()
        table.setCurrentCell(-1, -1)  # nothing chosen yet

    def _shares(self, i: int, shares: Sequence[int], kept: int) -> str:
        others = [(j, k) for j, k in enumerate(shares) if j != i]
        if len(others) == 1:
            j, k = others[0]
            return self.tr("shares {0} of {1} chunks with Q{2}").format(k, kept, j + 1)
        said = ", ".join(self.tr("{0} with Q{1}").format(k, j + 1) for j, k in others)
        return self.tr("shares of {0} chunks: {1}").format(kept, said)

    def _part(self, part: KeptPart) -> QTableWidgetItem:
        if part.rank is not None:
            why = self.tr("rank {0}").format(part.rank)
        elif part.next_to is not None:
            why = self.tr("next to rank {0}").format(part.next_to)
        else:
            why = self.tr("kept")
        text = self.tr("{0:,} tokens · {1}").format(part.tokens, why)
        item = self._item(f"{SHARED_MARK} {text}" if part.shared_with else text)
        item.setData(SPAN_ROLE, (part.start, part.end))
        item.setData(SHARED_ROLE, part.shared_with)
        if part.shared_with:
            item.setBackground(SHARED_COLOR)
            item.setToolTip(self.tr("Also kept for {0}").format(
                ", ".join(f"Q{j + 1}" for j in part.shared_with)))  # fmt: skip
        return item

    @staticmethod
    def _item(text: str) -> QTableWidgetItem:
        item = QTableWidgetItem(text)
        item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
        return item

    def _chosen(self, row: int, column: int) -> None:
        item = self.table.item(row, column)
        span = item.data(SPAN_ROLE) if item is not None else None
        if span:
            self.part_chosen.emit(int(span[0]), int(span[1]))


class SeveralQuestions(FollowsLanguage, QDialog):
    """Several questions, one per line; OK (or Ctrl+Enter) takes them."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = plain_label()
        self.label.setWordWrap(True)
        self.editor = QPlainTextEdit()
        self.editor.setPlainText(text)
        self.editor.setTabChangesFocus(True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                        | QDialogButtonBox.StandardButton.Cancel)  # fmt: skip
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        for keys in ("Ctrl+Return", "Ctrl+Enter"):
            QShortcut(QKeySequence(keys), self).activated.connect(self.accept)
        layout = QVBoxLayout(self)
        layout.addWidget(self.label)
        layout.addWidget(self.editor, 1)
        layout.addWidget(self.buttons)
        self.resize(480, 260)
        self.retranslate()

    def retranslate(self) -> None:
        self.setWindowTitle(self.tr("Several Questions"))
        self.label.setText(self.tr(
            "One question per line. Under “retrieve” each question gets its own plan; each "
            "answer becomes its own version in the thread. Ctrl+Enter takes them."))  # fmt: skip

    def questions(self) -> list[str]:
        """The questions typed, one per line, blank lines left out."""
        return [q.strip() for q in self.editor.toPlainText().split("\n") if q.strip()]
