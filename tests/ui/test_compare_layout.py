"""Compare as a person meets it: a menu that stays open while ticking, panes that share the
width they have, a table whose every column says what it means."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from PySide6.QtCore import QPoint, QRect, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QScrollArea, QWidget

from app.core.jobs.events import (
    JobFinished,
    JobResult,
    PlanReady,
    StrategyStarted,
    TokenBatch,
)
from app.services.history import HistoryView, VersionInfo
from app.ui.compare_view import MIN_PANE_WIDTH, CompareView
from app.ui.history_columns import Column
from app.ui.history_tree_model import HistoryTreeModel
from app.ui.i18n import strategy_label
from app.ui.menus import ChecklistMenu
from tests.cut_texts import CUT_INSIDE
from tests.ui.history_cells import text
from tests.ui.total_probes import header_total, said
from tests.ui.windows import Windows


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


def test_panes_line_up_when_the_width_allows_and_are_tabs_when_it_does_not(qtbot) -> None:
    """Side by side where each pane gets MIN_PANE_WIDTH; in a narrower dock a tab per strategy
    (every strategy one click away at the top, not a pane below the fold), following the
    strategy that streams unless the person chose another tab; back side by side when wider."""
    view = CompareView()
    qtbot.addWidget(view)
    view.resize(3 * MIN_PANE_WIDTH + 10, 600)
    view.show()
    strategies = ["head", "tail", "middle"]
    view.start(strategies)
    qtbot.waitUntil(lambda: len({p.y() for p in view.panes.values()}) == 1, timeout=2_000)
    assert view.side_by_side() and view.tabs.count() == 0
    widths = {p.width() for p in view.panes.values()}
    assert max(widths) - min(widths) <= 2 and min(widths) >= MIN_PANE_WIDTH - 20  # shared

    view.resize(3 * MIN_PANE_WIDTH - 10, 600)  # too narrow for three
    qtbot.waitUntil(view.tabs.isVisible, timeout=2_000)
    tabs = [view.tabs.tabText(i) for i in range(view.tabs.count())]
    assert tabs == [strategy_label(s) for s in strategies]
    assert not view.side_by_side()
    assert all(p.title() == "" for p in view.panes.values())  # the tab names it, once
    view.on_event(StrategyStarted("tail"))
    assert view.tabs.currentIndex() == 1  # the tab of the strategy streaming
    view.on_event(TokenBatch("answer 1", "From the tail.", 4, 0, ()))
    tail = view.panes["tail"]
    assert tail.isVisible() and tail.width() >= view.width() - 40  # the dock's whole width
    view.tabs.setCurrentIndex(0)  # the person reads head's answer
    view.on_event(StrategyStarted("middle"))
    assert view.tabs.currentIndex() == 0  # left where the person put it

    view.resize(3 * MIN_PANE_WIDTH + 10, 600)
    qtbot.waitUntil(lambda: len({p.y() for p in view.panes.values()}) == 1, timeout=2_000)
    assert view.tabs.count() == 0 and all(p.isVisible() for p in view.panes.values())
    assert [p.title() for p in view.panes.values()] == [strategy_label(s) for s in strategies]
    assert tail.output.toPlainText() == "From the tail."  # the panes moved, not made again
    view.start(["head", "tail", "middle", "entropy"])
    assert not view.side_by_side() and view.tabs.count() == 4  # four need 4 x MIN_PANE_WIDTH
    view.clear()
    assert view.panes == {} and view.table.columnCount() == 0 and view.tabs.count() == 0


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


def _answer(view: CompareView, strategies: list[str], answer: str) -> None:
    """Each strategy's events as a compare sends them, with ``answer`` as its reply."""
    for name in strategies:
        view.on_event(StrategyStarted(name))
        view.on_event(PlanReady(name, 925, 860, 2_899, 1, 1.0, 1))
        view.on_event(TokenBatch("answer 1", answer, 8, 0, ()))
        result = JobResult("ask", name, "stop", 1024, prompt_tokens=909, completion_tokens=8,
                           kv_peak_cells=917, seconds=1.2)  # fmt: skip
        view.on_event(JobFinished(result))


def test_a_short_answer_has_no_scroll_bar_of_its_own(qtbot) -> None:
    view = CompareView()
    qtbot.addWidget(view)
    view.resize(470, 460)
    view.show()
    strategies = ["head", "tail", "middle"]
    view.start(strategies)
    _answer(view, strategies, "A short answer.")
    qtbot.wait(50)  # the layout settles
    for pane in view.panes.values():
        bar = pane.output.verticalScrollBar()
        assert not bar.isVisible() and bar.maximum() == 0, pane.strategy


def _three_long_answers(qtbot, make_window: Windows, screen: QRect) -> CompareView:
    """The compare tab of a window fitted to ``screen`` (no model, no document: the layout
    alone), three strategies each with a long answer."""
    window = make_window()
    window.fit_to(screen)
    window.show()
    qtbot.waitExposed(window)
    view = window.compare
    window.tabs.setCurrentWidget(view)
    strategies = ["head", "retrieve", "entropy"]
    view.start(strategies)
    _answer(view, strategies, " ".join(f"Sentence {i} of a long answer." for i in range(40)))
    return view


def test_three_strategies_start_in_view_in_the_window_at_1366x768(
    qtbot, make_window: Windows
) -> None:
    """The compare tab of the three-stage dock at 1366x768: three long answers side by side,
    each pane's top in the panel's view without scrolling it (the third is not below the
    first), none cut off at the right."""
    view = _three_long_answers(qtbot, make_window, QRect(0, 0, 1366, 768))
    area = view.findChild(QScrollArea)
    # the panes have grown with their answers, taller than the panel: it scrolls, once
    qtbot.waitUntil(lambda: area.verticalScrollBar().maximum() > 0 and all(
        p.height() > p.output.height() for p in view.panes.values()), timeout=5_000)  # fmt: skip
    seen = area.viewport().rect()
    for pane in view.panes.values():
        top_left = pane.mapTo(area.viewport(), QPoint(0, 0))
        top_right = pane.mapTo(area.viewport(), QPoint(pane.width() - 1, 0))
        where = (pane.strategy, top_left, top_right, seen)
        assert seen.contains(top_left) and seen.contains(top_right), where
        assert pane.output.verticalScrollBar().maximum() == 0, "the answer scrolls in its box"


def test_three_strategies_are_tabs_in_view_in_the_window_at_1024x700(
    qtbot, make_window: Windows
) -> None:
    """At 1024x700 the dock cannot give three panes MIN_PANE_WIDTH (issue 49, row 9: the third
    lay below the fold): a tab per strategy, every tab's title in view, the shown answer whole
    at the dock's width."""
    view = _three_long_answers(qtbot, make_window, QRect(0, 0, 1024, 700))
    strategies = list(view.panes)
    qtbot.waitUntil(view.tabs.isVisible, timeout=5_000)
    bar = view.tabs.tabBar()
    for i, name in enumerate(strategies):
        assert view.tabs.tabText(i) == strategy_label(name)
        assert bar.rect().contains(bar.tabRect(i)), (name, bar.tabRect(i), bar.rect())
        view.tabs.setCurrentIndex(i)
        pane = view.panes[name]
        qtbot.waitUntil(pane.isVisible, timeout=2_000)
        assert pane.width() >= view.width() - 40, (pane.width(), view.width())
        assert pane.output.verticalScrollBar().maximum() == 0, "the answer scrolls in its box"


def test_a_compare_in_the_window_says_one_total_and_tells_its_versions_apart(
    qtbot, make_window: Windows, model_path: Path, tmp_path: Path
) -> None:
    """A real compare of three strategies at 1366x768 on a text the plans cut inside words and
    whitespace runs (issue 49, rows 8 and 9): each pane, the table and the plan line say the
    header's total; in the History tab each version's strategy is in view, in its label."""
    doc = tmp_path / "hostile.txt"
    doc.write_text(CUT_INSIDE, encoding="utf-8")
    window = make_window(model_path, doc, n_ctx=256)
    window.fit_to(QRect(0, 0, 1366, 768))
    with qtbot.waitSignal(window.ready, timeout=120_000):
        window.show()
    window.max_tokens.setValue(1)
    strategies = ["head", "tail", "entropy"]
    with qtbot.waitSignal(window.job_finished, timeout=300_000):
        window.run_compare(strategies)
    whole = header_total(window)
    for pane in window.compare.panes.values():
        assert said(r"of ([\d,]+) tokens kept", pane.plan_label.text()) == whole, pane.strategy
    assert [row[1].split(" / ")[1] for row in window.compare.summary()] == [f"{whole:,}"] * 3
    assert said(r"of ([\d,]+) tokens kept", window.buffers.plan_label.text()) == whole

    panel = window.history
    assert panel is not None
    window.tabs.setCurrentWidget(panel)
    model, tree = panel.tree.history, panel.tree
    qtbot.waitUntil(lambda: {v.strategy for v in model.view.versions} >= set(strategies),
                    timeout=30_000)  # fmt: skip
    qtbot.wait(50)  # the columns are fitted
    header, width = tree.header(), tree.viewport().width()
    in_view = [c for c in Column
               if header.sectionViewportPosition(c) + header.sectionSize(c) <= width]  # fmt: skip
    for v in model.view.versions:
        shown = " | ".join(text(model.version_index(v.id), c) for c in in_view)
        assert strategy_label(v.strategy) in shown, (shown, width)


def test_the_versions_of_one_compare_name_their_strategy_in_their_label(qtbot) -> None:
    """One compare's versions (recorded together, one after the other) differ only in their
    strategy: their label says it (the Strategy column lies off to the right of a narrow dock);
    other versions keep their bare number, a later run of the same job too."""
    made = datetime(2026, 1, 1, tzinfo=UTC)

    def version(n: int, parent: int | None, task: str, strategy: str, prompt: str = ""):
        return VersionInfo(n, 1, parent, n, made, task, strategy, prompt, "/m.gguf", "m" * 64,
                           {"n_ctx": 512, "max_tokens": 8})  # fmt: skip

    asked = "What is a kluge?"
    compared = [version(n, 1, "ask", s, asked) for n, s in ((2, "head"), (3, "retrieve"),
                                                            (4, "tail"))]  # fmt: skip
    later = [version(5, 1, "summarize", "middle"), version(6, 5, "ask", "head", asked),
             version(7, 1, "ask", "middle", asked)]  # fmt: skip
    versions = [version(1, None, "summarize", "head"), *compared, *later]
    model = HistoryTreeModel()
    model.set_view(HistoryView([], versions, {}, {}), sessions=False)
    labels = {v.id: model.version_index(v.id).data() for v in versions}
    assert labels == {1: "v1", 2: "v2 · head", 3: "v3 · retrieve", 4: "v4 · tail", 5: "v5",
                      6: "v6", 7: "v7"}  # fmt: skip
