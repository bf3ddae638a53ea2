"""Strategies side by side: the same document and job under two to four overflow strategies.

Each pane shows its strategy's plan (kept tokens of the total, passes, boundary integrity, needle
retention when needles are set), its output as it streams, and once done its time and finish
reason; a table at the bottom sums them up. The view only observes the events of a ``compare``
job: a :class:`StrategyStarted` says which pane the events that follow belong to.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QT_TRANSLATE_NOOP, Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import (
    QGridLayout,
    QGroupBox,
    QPlainTextEdit,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.jobs.tasks import JobFinished, JobResult, PlanReady, StrategyStarted, TokenBatch
from app.ui.widgets import fixed_font, plain_label

MAX_PANES = 4


class StrategyPane(QGroupBox):
    """One strategy: its plan, its streaming output, its figures."""

    def __init__(self, strategy: str, parent: QWidget | None = None) -> None:
        super().__init__(strategy, parent)
        self.strategy = strategy
        self.plan_label = plain_label(self.tr("waiting…"))
        self.plan_label.setWordWrap(True)
        self.output = QPlainTextEdit()
        self.output.setReadOnly(True)
        self.figures = plain_label()
        layout = QVBoxLayout(self)
        layout.addWidget(self.plan_label)
        layout.addWidget(self.output, 1)
        layout.addWidget(self.figures)

    def show_plan(self, ev: PlanReady, needle_retention: float | None) -> None:
        share = ev.kept_tokens / ev.total_tokens if ev.total_tokens else 1.0
        text = self.tr("{0:,} of {1:,} tokens kept ({2:.0%}), {3} pass(es), boundaries {4:.0%}")
        text = text.format(ev.kept_tokens, ev.total_tokens, share, ev.passes,
                           ev.boundary_integrity)  # fmt: skip
        if needle_retention is not None:
            text += self.tr(", needles {0:.0%}").format(needle_retention)
        self.plan_label.setText(text)

    def append(self, text: str) -> None:
        cursor = self.output.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text)
        self.output.setTextCursor(cursor)

    def finish(self, seconds: float, reason: str, final_text: str) -> None:
        self.figures.setText(self.tr("{0:.1f} s, {1}").format(seconds, reason))
        if final_text and final_text != self.output.toPlainText().strip():
            self.output.setPlainText(final_text)  # multi-pass: the combined answer replaces steps


class CompareView(QWidget):
    """Two to four :class:`StrategyPane` side by side and a summary table."""

    # the table's headers; QT_TRANSLATE_NOOP lets lupdate see the texts tr() gets at run time
    COLUMNS = (
        QT_TRANSLATE_NOOP("CompareView", "strategy"),
        QT_TRANSLATE_NOOP("CompareView", "kept"),
        QT_TRANSLATE_NOOP("CompareView", "passes"),
        QT_TRANSLATE_NOOP("CompareView", "boundaries"),
        QT_TRANSLATE_NOOP("CompareView", "needles"),
        QT_TRANSLATE_NOOP("CompareView", "prompt"),
        QT_TRANSLATE_NOOP("CompareView", "generated"),
        QT_TRANSLATE_NOOP("CompareView", "KV peak"),
        QT_TRANSLATE_NOOP("CompareView", "seconds"),
        QT_TRANSLATE_NOOP("CompareView", "finish"),
    )

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.panes: dict[str, StrategyPane] = {}
        self._current: StrategyPane | None = None
        self._needles: dict[str, float] = {}
        self._grid_host = QWidget()
        self._grid = QGridLayout(self._grid_host)
        self.table = QTableWidget(0, len(self.COLUMNS))
        self.table.setHorizontalHeaderLabels([self.tr(c) for c in self.COLUMNS])
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self._grid_host)
        splitter.addWidget(self.table)
        splitter.setStretchFactor(0, 3)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)
        self._plans: dict[str, PlanReady] = {}

    def start(self, strategies: Sequence[str], needles: dict[str, float] | None = None) -> None:
        """New panes for these strategies (two to four); ``needles`` maps a strategy to its plan's
        needle retention, when the person set needles."""
        if not 2 <= len(strategies) <= MAX_PANES:
            raise ValueError(f"compare two to {MAX_PANES} strategies")
        for pane in self.panes.values():
            pane.deleteLater()
        self.panes = {}
        self._plans = {}
        self._needles = dict(needles or {})
        self._current = None
        self.table.setRowCount(0)
        columns = 2 if len(strategies) == 4 else len(strategies)
        for i, name in enumerate(strategies):
            pane = StrategyPane(name)
            self.panes[name] = pane
            self._grid.addWidget(pane, i // columns, i % columns)
            # the system's fixed font: the family "monospace" may resolve to a proportional one
            pane.output.setFont(fixed_font())

    def set_needle_retention(self, strategy: str, retention: float) -> None:
        """The share of the person's needles this strategy's plan lets reach the model."""
        self._needles[strategy] = retention
        pane, plan = self.panes.get(strategy), self._plans.get(strategy)
        if pane is not None and plan is not None:
            pane.show_plan(plan, retention)
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0).text() == strategy:
                self.table.setItem(row, self.COLUMNS.index("needles"),
                                   QTableWidgetItem(f"{retention:.0%}"))  # fmt: skip

    def on_event(self, ev: object) -> None:
        if isinstance(ev, StrategyStarted):
            self._current = self.panes.get(ev.strategy)
        elif self._current is None:
            return
        elif isinstance(ev, PlanReady):
            self._plans[ev.strategy] = ev
            self._current.show_plan(ev, self._needles.get(ev.strategy))
        elif isinstance(ev, TokenBatch):
            self._current.append(ev.text)
        elif isinstance(ev, JobFinished):
            r = ev.result
            self._current.finish(r.seconds, r.refused or r.error or r.finish_reason, r.text)
            self._add_row(r)

    def _add_row(self, r: JobResult) -> None:
        plan = self._plans.get(r.strategy)
        needle = self._needles.get(r.strategy)
        kept = f"{plan.kept_tokens:,} / {plan.total_tokens:,}" if plan else "–"
        cells = (
            r.strategy, kept, str(plan.passes) if plan else "–",
            f"{plan.boundary_integrity:.0%}" if plan else "–",
            f"{needle:.0%}" if needle is not None else "–",
            f"{r.prompt_tokens:,}", f"{r.completion_tokens:,}",
            f"{r.kv_peak_cells:,}", f"{r.seconds:.1f}",
            r.refused or r.error or r.finish_reason,
        )  # fmt: skip
        row = self.table.rowCount()
        self.table.insertRow(row)
        for col, text in enumerate(cells):
            self.table.setItem(row, col, QTableWidgetItem(text))
        self.table.resizeColumnsToContents()

    def summary(self) -> list[list[str]]:
        """The table's text, row by row (for tests and export)."""
        return [[self.table.item(r, c).text() for c in range(self.table.columnCount())]
                for r in range(self.table.rowCount())]  # fmt: skip
