"""Every text a person can read or hover in a widget tree, and the check that a widget follows
View ▸ Language: switched while shown, it reads exactly as one built in the new language.

The .qm is compiled from the committed .ts (as ``make setup`` does), so these checks test the
source of truth whether or not the build has run.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import QCoreApplication, QModelIndex, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSpinBox,
    QComboBox,
    QDockWidget,
    QDoubleSpinBox,
    QGroupBox,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QPlainTextEdit,
    QProgressBar,
    QSpinBox,
    QTableView,
    QTabWidget,
    QTextEdit,
    QWidget,
)

from app.core.paths import resources_dir
from app.ui import i18n
from app.ui.widgets import ElidedLabel

TS = resources_dir() / "translations" / "contextlens_zh_CN.ts"
FIGURE = re.compile(r"\d[\d,.]*")
MAX_ROWS = 200  # of an item view's cells, enough to see every fixed row of a panel


def tool(name: str) -> str:
    """pyside6-lupdate / pyside6-lrelease of the environment running the tests."""
    return str(Path(sys.executable).with_name(f"pyside6-{name}"))


def compile_chinese(folder: Path) -> Path:
    """contextlens_zh_CN.qm compiled from the committed .ts into ``folder``."""
    subprocess.run([tool("lrelease"), "-silent", str(TS), "-qm",
                    str(folder / "contextlens_zh_CN.qm")], check=True)  # fmt: skip
    return folder


def _plot_texts(plot: pg.PlotWidget) -> list[tuple[str, str]]:
    item = plot.getPlotItem()
    texts = [("plot title", item.titleLabel.text)]
    for side in ("left", "bottom", "right", "top"):
        axis = item.getAxis(side)
        if axis.isVisible():
            texts.append((f"plot {side} axis", axis.labelText))
    if item.legend is not None:
        texts += [("plot legend", label.text) for _sample, label in item.legend.items]
    return texts


def _view_texts(view: QAbstractItemView) -> list[tuple[str, str]]:
    model = view.model()
    if model is None:
        return []
    texts = []
    top = QModelIndex()
    try:
        columns = model.columnCount(top)
    except TypeError:  # a list model keeps it private: one column
        columns = 1
    roles = (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole)
    horizontal = Qt.Orientation.Horizontal
    for section in range(columns):
        texts += [("header", str(model.headerData(section, horizontal, role))) for role in roles]
    if isinstance(view, QTableView) and not view.verticalHeader().isHidden():  # rows named too
        vertical = Qt.Orientation.Vertical
        for section in range(min(model.rowCount(top), MAX_ROWS)):
            texts += [("row header", str(model.headerData(section, vertical, role)))
                      for role in roles]  # fmt: skip
    # (parent index, row): the top level, then each branch, breadth first, up to MAX_ROWS rows
    rows: list[tuple[QModelIndex | None, int]] = [(None, r) for r in range(model.rowCount(top))]
    seen = 0
    while seen < min(len(rows), MAX_ROWS):
        parent, row = rows[seen]
        seen += 1
        for column in range(columns):
            index = model.index(row, column) if parent is None else model.index(row, column, parent)
            texts += [("cell", str(model.data(index, role))) for role in roles]
        first = model.index(row, 0) if parent is None else model.index(row, 0, parent)
        rows += [(first, r) for r in range(min(model.rowCount(first), MAX_ROWS))]
    return texts


def visible_texts(root: QWidget) -> list[tuple[str, str]]:
    """(where, text) for every string a person can see or hover in ``root`` and its children,
    its actions' and menus' included."""
    texts: list[tuple[str, str]] = [("title", root.windowTitle())]
    if isinstance(root, QMainWindow):
        texts.append(("status", root.statusBar().currentMessage()))
    for w in [root, *root.findChildren(QWidget)]:
        kind = type(w).__name__
        texts.append((f"{kind} tooltip", w.toolTip()))
        if isinstance(w, QLabel | QAbstractButton | ElidedLabel):
            texts.append((kind, w.text()))
        if isinstance(w, QGroupBox):
            texts.append((kind, w.title()))
        if isinstance(w, QDockWidget):
            texts.append((kind, w.windowTitle()))
        if isinstance(w, QLineEdit | QPlainTextEdit | QTextEdit):
            texts.append((f"{kind} placeholder", w.placeholderText()))
        if isinstance(w, QTabWidget):
            texts += [(kind, w.tabText(i)) for i in range(w.count())]
            texts += [(f"{kind} tab tooltip", w.tabToolTip(i)) for i in range(w.count())]
        if isinstance(w, QComboBox):
            texts += [(kind, w.itemText(i)) for i in range(w.count())]
            texts.append((f"{kind} placeholder", w.placeholderText()))
        if isinstance(w, QMenu):
            texts.append((kind, w.title()))
        if isinstance(w, QSpinBox | QDoubleSpinBox):
            texts += [(kind, w.prefix()), (kind, w.suffix())]
        if isinstance(w, QAbstractSpinBox):
            texts.append((f"{kind} special", w.specialValueText()))
        if isinstance(w, QProgressBar):
            texts.append((kind, w.format()))
        if isinstance(w, QAbstractItemView) and not isinstance(w, QHeaderView):
            texts += [(f"{kind} {where}", text) for where, text in _view_texts(w)]
        if isinstance(w, pg.PlotWidget):
            texts += _plot_texts(w)
    # each action once, whether it belongs to the tree or is only added to one of its widgets
    # (a menu bar too narrow for its menus shows some of them again in an overflow menu)
    actions = {id(a): a for a in root.findChildren(QAction)}
    for w in [root, *root.findChildren(QWidget)]:
        actions.update((id(a), a) for a in w.actions())
    for action in actions.values():
        texts += [("QAction", action.text()), ("QAction tooltip", action.toolTip())]
    return [(where, text) for where, text in texts if text and text != "None"]


def _texts(widget: QWidget) -> Counter[str]:
    """The texts of ``widget``, each figure written "#": memory and times move between two
    looks, the words around them do not."""
    return Counter(FIGURE.sub("#", text) for _where, text in visible_texts(widget))


def assert_follows_language(
    make: Callable[[], QWidget], folder: Path, settle: Callable[[QWidget], None] = lambda w: None
) -> None:
    """``make()`` built in English, then switched to Chinese while it exists, reads exactly as
    ``make()`` built in Chinese (and differs from English); switched back, it reads as before.
    ``folder`` holds the compiled zh_CN .qm; ``settle(widget)`` waits for whatever a new widget
    fills in on its own (a file read in the background). Leaves English installed."""
    app = QCoreApplication.instance()
    assert app is not None
    try:
        assert i18n.install_translator(app, i18n.ENGLISH, folder=folder) == i18n.ENGLISH
        widget = make()
        settle(widget)
        english = _texts(widget)
        assert i18n.install_translator(app, "zh_CN", folder=folder) == "zh_CN"
        QCoreApplication.processEvents()
        switched = _texts(widget)
        fresh = make()
        settle(fresh)
        built = _texts(fresh)
        assert switched != english, "nothing changed: the widget kept its English texts"
        stale = sorted((switched - built).elements())
        missing = sorted((built - switched).elements())
        assert not stale and not missing, (
            f"switched live but not as built in Chinese:\n kept: {stale}\n lacking: {missing}"
        )
        i18n.install_translator(app, i18n.ENGLISH, folder=folder)
        QCoreApplication.processEvents()
        back = _texts(widget)
        changed = sorted(((back - english) + (english - back)).elements())
        assert back == english, f"back in English, differs: {changed}"
    finally:
        i18n.install_translator(app, i18n.ENGLISH)
