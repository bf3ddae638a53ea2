"""Compare as a person meets it: a menu that stays open while ticking, panes that share the
width they have, a table whose every column says what it means."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QWidget

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
    assert view.panes == {} and view.table.rowCount() == 0


def test_every_column_of_the_table_says_what_it_means(qtbot) -> None:
    view = CompareView()
    qtbot.addWidget(view)
    tips = [view.table.horizontalHeaderItem(c).toolTip() for c in range(view.table.columnCount())]
    assert len(tips) == len(CompareView.COLUMNS) and all(len(t) > 20 for t in tips)
    assert "Needles box" in tips[CompareView.COLUMNS.index("needles")]

