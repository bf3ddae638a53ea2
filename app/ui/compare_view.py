"""Strategies side by side: the same document and job under two to four overflow strategies.

Each pane shows its strategy's plan (kept tokens of the total, passes, boundary integrity, needle
retention when needles are set), its output as it streams, whole (the box grows with the text and
the panes scroll together), and once done its time and finish reason. The panes stand side by side
where the width gives each MIN_PANE_WIDTH; in a narrower dock they become tabs, one per strategy,
so that every strategy is one click away at the top rather than a pane below the fold. A table at
the bottom sums them up, a column per strategy and a row per figure, so that it fits a narrow dock
without scrolling sideways. The view only observes the events of a ``compare`` job: a
:class:`StrategyStarted` says which pane the events that follow belong to.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent, QTextCursor
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.core.jobs.events import (
    JobFinished,
    JobResult,
    PlanReady,
    ServerLost,
    StrategyStarted,
    TokenBatch,
)
from app.ui.i18n import QT_TRANSLATE_NOOP, FollowsLanguage, finish_label, strategy_label
from app.ui.widgets import plain_label

MAX_PANES = 4
# px: a pane narrower than this wraps its answer every word or two. Three strategies side by side
# in the three-stage dock at 1366x768 (about 470 px) get about 150 px each, in one row; at
# 1024x700 (about 380 px) they are tabs, each answer the dock's whole width.
MIN_PANE_WIDTH = 130


class StrategyPane(FollowsLanguage, QGroupBox):
    """One strategy: its plan, its streaming output, its figures."""

    def __init__(self, strategy: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.strategy = strategy
        self.titled = True  # False in a tab, whose title already names the strategy
        self.plan_label = plain_label()
        self.plan_label.setWordWrap(True)
        self.output = QTextEdit()
        self.output.setReadOnly(True)
        self.output.setAcceptRichText(False)
        # the whole answer, never a box of three lines to scroll: it grows with its text
        self.output.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.output.setSizeAdjustPolicy(QAbstractScrollArea.SizeAdjustPolicy.AdjustIgnored)
        self.output.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.output.document().documentLayout().documentSizeChanged.connect(
            lambda _size: self._fit_output())  # fmt: skip
        self.figures = plain_label()
        layout = QVBoxLayout(self)
        layout.addWidget(self.plan_label)
        layout.addWidget(self.output)
        layout.addWidget(self.figures)
        layout.addStretch(1)  # panes side by side start their answers at the same height
        # what the pane shows, kept to word it again: the plan and its needle retention, and
        # the finished run's seconds and finish reason
        self._plan: tuple[PlanReady, float | None] | None = None
        self._finished: tuple[float, str] | None = None
        self.retranslate()

    def _fit_output(self) -> None:
        frame = 2 * self.output.frameWidth()
        least = 3 * self.output.fontMetrics().lineSpacing()  # room for a few lines at first
        height = max(least, int(self.output.document().size().height()))
        if self.output.height() != height + frame + 2:
            self.output.setFixedHeight(height + frame + 2)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit_output()  # another width wraps the text to another height

    def retranslate(self) -> None:
        self.setTitle(strategy_label(self.strategy) if self.titled else "")
        self._show_plan()
        self._show_figures()

    def show_plan(self, ev: PlanReady, needle_retention: float | None) -> None:
        self._plan = (ev, needle_retention)
        self._show_plan()

    def _show_plan(self) -> None:
        if self._plan is None:
            self.plan_label.setText(self.tr("waiting…"))
            return
        ev, needle_retention = self._plan
        kept, total = ev.of_document()  # of the document's one total
        share = kept / total if total else 1.0
        text = self.tr("{0:,} of {1:,} tokens kept ({2:.0%}), {3} pass(es), boundaries {4:.0%}")
        text = text.format(kept, total, share, ev.passes, ev.boundary_integrity)
        if needle_retention is not None:
            text += self.tr(", needles {0:.0%}").format(needle_retention)
            self.plan_label.setToolTip(self.tr(
                "Needles: the share of the facts typed in the Needles box whose text lies in "
                "the spans this plan keeps"))  # fmt: skip
        self.plan_label.setText(text)

    def append(self, text: str) -> None:
        cursor = self.output.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text)
        self.output.setTextCursor(cursor)

    def finish(self, seconds: float, reason: str, final_text: str) -> None:
        """The run is done: its time, why it ended (a finish reason the engine records, shown
        translated, or a sentence shown as it is) and its final text."""
        self._finished = (seconds, reason)
        self._show_figures()
        if final_text and final_text != self.output.toPlainText().strip():
            self.output.setPlainText(final_text)  # multi-pass: the combined answer replaces steps

    def _show_figures(self) -> None:
        if self._finished is not None:
            seconds, reason = self._finished
            self.figures.setText(self.tr("{0:.1f} s, {1}").format(seconds, finish_label(reason)))


class CompareView(FollowsLanguage, QWidget):
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

    # what each column means, for its header's tooltip (same order as COLUMNS)
    COLUMN_TIPS = (
        QT_TRANSLATE_NOOP("CompareView", "The overflow strategy that chose what reaches the model"),
        QT_TRANSLATE_NOOP("CompareView", "Document tokens the plan keeps, of all its tokens"),
        QT_TRANSLATE_NOOP("CompareView", "Model calls the strategy makes (map-reduce and rolling "
                                         "make one per window, then combine)"),
        QT_TRANSLATE_NOOP("CompareView", "Share of the cuts between kept spans that fall on a "
                                         "sentence boundary or better"),
        QT_TRANSLATE_NOOP("CompareView", "Share of the needles (the facts typed in the Needles "
                                         "box) whose text lies in the kept spans"),
        QT_TRANSLATE_NOOP("CompareView", "Prompt tokens the model evaluated, all calls together"),
        QT_TRANSLATE_NOOP("CompareView", "Tokens the model generated, all calls together"),
        QT_TRANSLATE_NOOP("CompareView", "The most KV cache cells the job held at once"),
        QT_TRANSLATE_NOOP("CompareView", "Wall time of the strategy's run, in seconds"),
        QT_TRANSLATE_NOOP("CompareView", "Why the reply ended: stop (the model finished), "
                                         "length (the reply's room ran out), cancelled, or the "
                                         "error"),
    )  # fmt: skip

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.panes: dict[str, StrategyPane] = {}
        self._side_by_side: bool | None = None  # None: the panes are not placed yet
        self._current: StrategyPane | None = None
        self._needles: dict[str, float] = {}
        self._row_host = QWidget()
        self._row = QHBoxLayout(self._row_host)
        self._row.setAlignment(Qt.AlignmentFlag.AlignTop)
        side = QScrollArea()  # the answers whole, side by side, scrolling together
        side.setWidget(self._row_host)
        side.setWidgetResizable(True)
        side.setFrameShape(QFrame.Shape.NoFrame)
        side.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.tabs = QTabWidget()  # a narrow dock: a tab per strategy, each answer full width
        self.tabs.setObjectName("compare-tabs")
        self.tabs.setDocumentMode(True)
        self._panes_stack = QStackedWidget()
        self._panes_stack.addWidget(side)
        self._panes_stack.addWidget(self.tabs)
        # a column per strategy, a row per figure (the strategy names the column)
        self.table = QTableWidget(len(self.COLUMNS) - 1, 0)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.setWordWrap(False)
        rows = self.table.verticalHeader()
        rows.setDefaultSectionSize(self.fontMetrics().height() + 6)
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        # every figure in view, never a table to scroll: the splitter gives the panes the rest
        self.table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._fit_table()
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.setObjectName("splitter-compare")  # the window saves where the person put it
        splitter.addWidget(self._panes_stack)
        splitter.addWidget(self.table)
        splitter.setStretchFactor(0, 3)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)
        self._plans: dict[str, PlanReady] = {}
        self._results: list[JobResult] = []  # the table's rows
        self.retranslate()

    def retranslate(self) -> None:
        """The table's headers and rows in the language now installed (each pane words its
        own texts again)."""
        figures = zip(self.COLUMNS[1:], self.COLUMN_TIPS[1:], strict=True)
        for row, (title, tip) in enumerate(figures):
            header = QTableWidgetItem(self.tr(title))
            header.setToolTip(self.tr(tip))
            self.table.setVerticalHeaderItem(row, header)
        for i in range(self.tabs.count()):
            pane = self._tab_pane(i)
            if pane is not None:
                self.tabs.setTabText(i, strategy_label(pane.strategy))
        self._fill_table()

    def start(self, strategies: Sequence[str], needles: dict[str, float] | None = None) -> None:
        """New panes for these strategies (two to four); ``needles`` maps a strategy to its plan's
        needle retention, when the person set needles."""
        if not 2 <= len(strategies) <= MAX_PANES:
            raise ValueError(f"compare two to {MAX_PANES} strategies")
        self.clear()
        self._needles = dict(needles or {})
        for name in strategies:
            pane = StrategyPane(name)
            self.panes[name] = pane
        self._side_by_side = None
        self._arrange()

    def side_by_side(self) -> bool:
        """Whether the panes stand side by side: the width gives each at least MIN_PANE_WIDTH
        (every strategy's answer starts in view, each as tall as its text, the panes scrolling
        together). In a narrower dock they are tabs rather than panes a word wide or a grid
        whose last pane lies below the fold."""
        return self.width() >= len(self.panes) * MIN_PANE_WIDTH

    def _arrange(self) -> None:
        side_by_side = self.side_by_side()
        if side_by_side == self._side_by_side:
            return
        self._side_by_side = side_by_side
        shown = self._shown_pane()
        self._take_panes()
        for pane in self.panes.values():
            pane.titled = side_by_side
            pane.retranslate()
            if side_by_side:
                self._row.addWidget(pane, 1)
            else:
                area = QScrollArea()  # a tab scrolls its answer; the answer's box never does
                area.setWidgetResizable(True)
                area.setFrameShape(QFrame.Shape.NoFrame)
                area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
                area.setWidget(pane)
                self.tabs.addTab(area, strategy_label(pane.strategy))
            pane.show()
        self._panes_stack.setCurrentIndex(0 if side_by_side else 1)
        shown = shown or self._current  # the tab read before, or the strategy streaming
        if shown is not None:
            self.show_pane(shown.strategy)

    def _take_panes(self) -> None:
        """Every pane out of the row and the tabs, none deleted (they move, or are cleared)."""
        for pane in self.panes.values():
            self._row.removeWidget(pane)
        while self.tabs.count():
            area = self.tabs.widget(0)
            self.tabs.removeTab(0)
            if isinstance(area, QScrollArea):
                taken = area.takeWidget()
                if taken is not None:
                    taken.setParent(self._row_host)
            if area is not None:
                area.deleteLater()

    def _tab_pane(self, index: int) -> StrategyPane | None:
        """The pane in this tab (None past the last tab)."""
        area = self.tabs.widget(index)
        pane = area.widget() if isinstance(area, QScrollArea) else None
        return pane if isinstance(pane, StrategyPane) else None

    def _shown_pane(self) -> StrategyPane | None:
        """The pane of the tab now shown (None side by side, where all are)."""
        return self._tab_pane(self.tabs.currentIndex())

    def show_pane(self, strategy: str) -> None:
        """Bring this strategy's answer into view: its tab when the panes are tabs."""
        for i in range(self.tabs.count()):
            pane = self._tab_pane(i)
            if pane is not None and pane.strategy == strategy:
                self.tabs.setCurrentIndex(i)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._arrange()

    def clear(self) -> None:
        """No panes and an empty table (another document was opened)."""
        self._take_panes()
        for pane in self.panes.values():
            pane.hide()
            pane.deleteLater()
        self.panes, self._plans, self._needles, self._current = {}, {}, {}, None
        self._side_by_side = None
        self._results = []
        self.table.setColumnCount(0)

    def set_needle_retention(self, strategy: str, retention: float) -> None:
        """The share of the person's needles this strategy's plan lets reach the model."""
        self._needles[strategy] = retention
        pane, plan = self.panes.get(strategy), self._plans.get(strategy)
        if pane is not None and plan is not None:
            pane.show_plan(plan, retention)
        if any(r.strategy == strategy for r in self._results):
            self._fill_table()

    def on_event(self, ev: object) -> None:
        if isinstance(ev, StrategyStarted):
            # follow the run, unless the person chose another tab than the one streaming
            following = self._current is None or self._shown_pane() in (None, self._current)
            self._current = self.panes.get(ev.strategy)
            if following:
                self.show_pane(ev.strategy)  # the tab of the strategy now streaming
        elif self._current is None:
            return
        elif isinstance(ev, PlanReady):
            self._plans[ev.strategy] = ev
            self._current.show_plan(ev, self._needles.get(ev.strategy))
        elif isinstance(ev, TokenBatch):
            self._current.append(ev.text)
        elif isinstance(ev, ServerLost):  # a pool's server lost: the strategy runs again
            self._current.output.clear()
        elif isinstance(ev, JobFinished):
            r = ev.result
            self._current.finish(r.seconds, r.refused or r.error or r.finish_reason, r.text)
            self._results.append(r)
            self._add_row(r)

    def _fill_table(self) -> None:
        """A column per finished strategy, worded in the language now installed."""
        self.table.setColumnCount(0)
        for r in self._results:
            self._add_row(r)

    def _add_row(self, r: JobResult) -> None:
        plan = self._plans.get(r.strategy)
        needle = self._needles.get(r.strategy)
        shares = plan.of_document() if plan else None  # of the document's one total
        kept = f"{shares[0]:,} / {shares[1]:,}" if shares else "–"
        cells = (
            strategy_label(r.strategy), kept, str(plan.passes) if plan else "–",
            f"{plan.boundary_integrity:.0%}" if plan else "–",
            f"{needle:.0%}" if needle is not None else "–",
            f"{r.prompt_tokens:,}", f"{r.completion_tokens:,}",
            f"{r.kv_peak_cells:,}", f"{r.seconds:.1f}",
            r.refused or r.error or finish_label(r.finish_reason),
        )  # fmt: skip
        column = self.table.columnCount()
        self.table.insertColumn(column)
        name, *figures = cells
        header = QTableWidgetItem(name)
        header.setToolTip(self.tr(self.COLUMN_TIPS[0]))
        self.table.setHorizontalHeaderItem(column, header)
        for row, text in enumerate(figures):
            item = QTableWidgetItem(text)
            item.setToolTip(text)  # a cell narrower than its text still says all of it
            self.table.setItem(row, column, item)
        self._fit_table()

    def _fit_table(self) -> None:
        """The table's height: its header (as tall as a row until a strategy names a column)
        and every row."""
        rows = self.table.verticalHeader()
        header = max(self.table.horizontalHeader().sizeHint().height(), rows.defaultSectionSize())
        self.table.setMinimumHeight(header + rows.length() + 2 * self.table.frameWidth() + 2)

    def summary(self) -> list[list[str]]:
        """The table's text, a list per strategy in the order of COLUMNS (for tests and
        export)."""
        return [[_text(self.table.horizontalHeaderItem(c)),
                 *(_text(self.table.item(r, c)) for r in range(self.table.rowCount()))]
                for c in range(self.table.columnCount())]  # fmt: skip


def _text(item: QTableWidgetItem | None) -> str:
    assert item is not None  # a strategy's column comes with its header and every cell
    return item.text()
