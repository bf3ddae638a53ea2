"""Compare as a person meets it: a menu that stays open while ticking, panes that share the
width they have, a table whose every column says what it means."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QWidget

from app.core.jobs.events import (
    JobFinished,
    JobResult,
    PlanReady,
    StrategyStarted,
    TokenBatch,
)
from app.ui.compare_view import MIN_PANE_WIDTH, CompareView
from app.ui.menus import ChecklistMenu


def test_ticking_a_choice_leaves_the_menu_open(qtbot) -> None:
    host = QWidget()
    qtbot.addWidget(host)
    menu = ChecklistMenu("Compare", host)
    choices = [QAction(name, menu, checkable=True) for name in ("head", "tail", "middle")]
    command = QAction("Run", menu)
    for action in (*choices, command):
        menu.addAction(action)
    menu.popup(QPoint(0, 0))
    qtbot.waitExposed(menu)
    for action in choices[:2]:
        qtbot.mouseClick(menu, Qt.MouseButton.LeftButton,
                         pos=menu.actionGeometry(action).center())  # fmt: skip
        assert menu.isVisible()
    menu.setActiveAction(choices[2])
    qtbot.keyClick(menu, Qt.Key.Key_Space)
    assert menu.isVisible() and [a.isChecked() for a in choices] == [True, True, True]
    with qtbot.waitSignal(command.triggered, timeout=2_000):  # a command still closes it
        qtbot.mouseClick(menu, Qt.MouseButton.LeftButton,
                         pos=menu.actionGeometry(command).center())  # fmt: skip
    assert not menu.isVisible()


def test_panes_stack_when_the_width_is_short_and_line_up_when_it_is_not(qtbot) -> None:
    view = CompareView()
    qtbot.addWidget(view)
    view.resize(2 * MIN_PANE_WIDTH + 10, 600)
    view.show()
    view.start(["head", "tail", "middle"])
    assert view.pane_columns() == 2
    view.resize(3 * MIN_PANE_WIDTH + 10, 600)
    qtbot.waitUntil(lambda: len({p.y() for p in view.panes.values()}) == 1, timeout=2_000)
    widths = {p.width() for p in view.panes.values()}
    assert max(widths) - min(widths) <= 2 and min(widths) >= MIN_PANE_WIDTH - 20  # shared
    view.resize(MIN_PANE_WIDTH, 600)
    qtbot.waitUntil(lambda: len({p.x() for p in view.panes.values()}) == 1, timeout=2_000)
    view.start(["head", "tail", "middle", "entropy"])
    view.resize(3 * MIN_PANE_WIDTH + 10, 600)
    assert view.pane_columns() == 2  # two rows of two, not three and one
    view.clear()
    assert view.panes == {} and view.table.columnCount() == 0


def test_every_figure_of_the_table_says_what_it_means(qtbot) -> None:
    view = CompareView()
    qtbot.addWidget(view)
    tips = [view.table.verticalHeaderItem(r).toolTip() for r in range(view.table.rowCount())]
    assert len(tips) == len(CompareView.COLUMNS) - 1 and all(len(t) > 20 for t in tips)
    assert "Needles box" in tips[CompareView.COLUMNS.index("needles") - 1]



def test_each_answer_shows_whole_and_the_table_fits_a_narrow_dock(qtbot) -> None:
    """In the three-stage dock at 1366x768 (about 470 px wide): every answer is shown whole
    (its box grows with it; the panes scroll together) and every figure of every strategy is
    in view, without scrolling sideways or down."""
    view = CompareView()
    qtbot.addWidget(view)
    view.resize(470, 460)
    view.show()
    strategies = ["head", "retrieve", "middle", "tail"]
    view.start(strategies)
    answer = " ".join(f"Sentence {i} of a long answer about the Jargon File." for i in range(30))
    for name in strategies:
        view.on_event(StrategyStarted(name))
        view.on_event(PlanReady(name, 925, 860, 2_899, 1, 1.0, 1))
        view.on_event(TokenBatch("answer 1", answer, 400, 0, ()))
        result = JobResult("ask", name, "length", 1024, prompt_tokens=909,
                           completion_tokens=400, kv_peak_cells=988, seconds=4.1)  # fmt: skip
        view.on_event(JobFinished(result))
    qtbot.wait(50)  # the layout settles
    for pane in view.panes.values():
        box = pane.output
        assert box.toPlainText() == answer
        assert box.verticalScrollBar().maximum() == 0, "the answer is cut: its box scrolls"
        assert box.height() >= box.document().size().height()
    table = view.table
    assert table.columnCount() == len(strategies) and len(view.summary()) == len(strategies)
    assert view.summary()[1][:3] == ["retrieve", "860 / 2,899", "1"]
    assert table.horizontalScrollBar().maximum() == 0
    last = table.visualRect(table.model().index(table.rowCount() - 1, len(strategies) - 1))
    assert table.viewport().rect().contains(last), (last, table.viewport().rect())
