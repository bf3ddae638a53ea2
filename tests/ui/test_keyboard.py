"""The window from the keyboard alone, and in light and dark themes (no model needed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtTest import QTest
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QDockWidget,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMenu,
    QPlainTextEdit,
    QScrollBar,
    QTabBar,
    QTextEdit,
    QToolBar,
    QToolButton,
    QWidget,
)

from app.core.paths import sample_document
from app.ui import i18n
from app.ui.main_window import MainWindow
from app.ui.theme import apply_theme, current_theme

CONTROLS = (QAbstractButton, QComboBox, QLineEdit, QAbstractSpinBox, QAbstractSlider,
            QAbstractItemView, QPlainTextEdit, QTextEdit)  # fmt: skip


@pytest.fixture
def active_window(qtbot, empty_window: MainWindow) -> MainWindow:
    """The empty window, exposed and the active one: the keys go to it."""
    qtbot.waitExposed(empty_window)
    empty_window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is empty_window, timeout=5000)
    return empty_window


def _controls(window: MainWindow) -> list[QWidget]:
    """The visible, enabled controls a person operates (scroll bars and the toolbar's own
    buttons aside: those are reached by menus and shortcuts)."""
    found = []
    for w in window.findChildren(QWidget):
        if not isinstance(w, CONTROLS) or isinstance(w, QScrollBar):
            continue
        if isinstance(w, QToolButton) and isinstance(w.parent(), QToolBar):
            continue
        if isinstance(w, QAbstractButton) and isinstance(w.parent(), QDockWidget):
            continue  # a dock's float and close buttons: the View menu does both
        if isinstance(w, QHeaderView):
            continue  # sorting by a column header is the mouse's; the rows take the keys
        if w.isVisible() and w.isEnabled() and w.window() is window:
            found.append(w)
    return found


def test_every_control_is_in_the_tab_chain(active_window: MainWindow) -> None:
    chain, w = [], active_window.nextInFocusChain()
    while w is not active_window and len(chain) < 5000:
        chain.append(w)
        w = w.nextInFocusChain()
    reachable = {id(w) for w in chain if w.focusPolicy() & Qt.FocusPolicy.TabFocus}
    controls = _controls(active_window)
    assert len(controls) > 15  # the toolbar, the model panel, the buffers, the history
    missing = [f"{type(w).__name__} {w.accessibleName() or w.objectName()}" for w in controls
               if id(w) not in reachable and w.focusProxy() is None]  # fmt: skip
    assert not missing, f"not reachable with Tab: {missing}"


def test_toolbar_actions_have_shortcuts_or_menus(active_window: MainWindow) -> None:
    in_menus = {id(a) for menu_action in active_window.menuBar().actions()
                for a in menu_action.menu().actions()}  # fmt: skip
    for bar in active_window.findChildren(QToolBar):
        for action in bar.actions():
            if action.isSeparator() or not action.text():
                continue
            assert not action.shortcut().isEmpty() or id(action) in in_menus, action.text()


@pytest.mark.parametrize(
    ("keys", "where"),
    [
        ("Alt+T", "task_box"),
        ("Alt+S", "strategy_box"),
        ("Alt+L", "max_tokens"),
        ("Ctrl+1", "document_view"),
        ("Ctrl+2", "model_panel"),
        ("Ctrl+3", "tabs"),
        ("Ctrl+4", "history"),  # its tab comes to the front, the versions take the keys
    ],
)
def test_shortcuts_put_the_focus_where_they_say(qtbot, active_window: MainWindow, keys: str,
                                                where: str) -> None:  # fmt: skip
    target: QWidget = getattr(active_window, where)
    QTest.keySequence(active_window, keys)
    qtbot.waitUntil(lambda: QApplication.focusWidget() is not None, timeout=2000)
    focused = QApplication.focusWidget()
    assert focused is target or target.isAncestorOf(focused), (keys, focused)


def test_ctrl_2_reopens_a_closed_model_panel(qtbot, active_window: MainWindow) -> None:
    dock = active_window.model_panel.parentWidget()
    while dock is not None and not dock.objectName().startswith("dock-"):
        dock = dock.parentWidget()
    assert dock is not None
    dock.close()
    assert not active_window.model_panel.isVisible()
    QTest.keySequence(active_window, "Ctrl+2")
    qtbot.waitUntil(active_window.model_panel.isVisible, timeout=2000)
    assert active_window.model_panel.isAncestorOf(QApplication.focusWidget())


def test_the_theme_menu_switches_light_and_dark_and_is_remembered(
    qtbot, active_window: MainWindow
) -> None:
    app = QApplication.instance()
    menu = next(a.menu() for a in active_window.menuBar().actions() if a.text() == "&View")
    theme = next(a.menu() for a in menu.actions() if a.menu() is not None)
    choices = {a.data(): a for a in theme.actions()}
    assert set(choices) == {"system", "light", "dark"}
    try:
        active_window.open_document(sample_document())
        qtbot.waitUntil(lambda: active_window.session.document is not None, timeout=60_000)
        lightness = {}
        for name in ("dark", "light"):
            choices[name].trigger()
            assert current_theme(app) == name and active_window.settings.value("theme") == name
            pane = active_window.document_view.text
            qtbot.waitUntil(lambda p=pane: p.palette().color(QPalette.ColorRole.Base)
                            == app.palette().color(QPalette.ColorRole.Base))  # fmt: skip
            base = pane.palette().color(QPalette.ColorRole.Base)
            text = pane.palette().color(QPalette.ColorRole.Text)
            lightness[name] = base.lightnessF()
            assert abs(base.lightnessF() - text.lightnessF()) > 0.6  # text stays legible
        assert lightness["dark"] < 0.2 and lightness["light"] > 0.8
    finally:
        apply_theme(app, "system")


def _mnemonic(text: str) -> str | None:
    found = re.search(r"&([^&\s])", text.replace("&&", ""))
    return found.group(1).lower() if found else None


def test_alt_keys_are_unambiguous(active_window: MainWindow) -> None:
    """Alt + a letter reaches one thing only: the menus, buttons, labels and tabs of the
    window (its panels included) underline different letters."""
    texts = [a.text() for a in active_window.menuBar().actions()]
    for w in active_window.findChildren(QWidget):
        if w.window() is not active_window:
            continue  # dialogs have letters of their own
        if isinstance(w, QAbstractButton) or (isinstance(w, QLabel) and w.buddy() is not None):
            texts.append(w.text())
        elif isinstance(w, QTabBar):
            texts.extend(w.tabText(i) for i in range(w.count()))
    letters = [(m, t) for t in texts if (m := _mnemonic(t))]
    seen: dict[str, str] = {}
    clashes = []
    for letter, text in letters:
        if letter in seen:
            clashes.append(f"Alt+{letter.upper()}: {seen[letter]!r} and {text!r}")
        seen.setdefault(letter, text)
    assert len(letters) >= 15
    assert not clashes, clashes


def test_each_menu_underlines_different_letters_in_both_languages(
    active_window: MainWindow, compiled: Path
) -> None:
    """Within one menu each entry has a letter of its own, in English and in Chinese ("Go to
    the &History" and "T&heme" shared H in the View menu, and so did their translations)."""
    app = QApplication.instance()
    clashes = []
    try:
        for language in ("en", "zh_CN"):
            assert i18n.install_translator(app, language, folder=compiled) == language
            for menu in active_window.findChildren(QMenu):
                seen: dict[str, str] = {}
                for action in menu.actions():
                    text = action.menu().title() if action.menu() else action.text()
                    letter = _mnemonic(text)
                    if letter and letter in seen:
                        clashes.append(f"{language} {menu.title()}: {seen[letter]!r}, {text!r}")
                    if letter:
                        seen.setdefault(letter, text)
    finally:
        i18n.install_translator(app, i18n.ENGLISH)
    assert not clashes, clashes


@pytest.fixture
def big_file(tmp_path: Path) -> Path:
    """~6 MB: a few seconds of planning in the planning process."""
    path = tmp_path / "big.txt"
    path.write_text(sample_document().read_text(encoding="utf-8") * 4, encoding="utf-8")
    return path


def test_esc_cancels_planning_and_the_next_plan_works(qtbot, active_window: MainWindow,
                                                      big_file: Path) -> None:  # fmt: skip
    shown: list[object] = []
    active_window.plan_shown.connect(shown.append)
    active_window.open_document(big_file)
    qtbot.waitUntil(lambda: "plan" in active_window.waiting_for, timeout=30_000)
    plans = active_window.session.plans
    qtbot.waitUntil(lambda: plans.pid is not None, timeout=30_000)
    child = plans.pid
    assert active_window.controls.cancel_button.isVisible()
    assert active_window.cancel_action.isEnabled()
    QTest.keyClick(active_window, Qt.Key.Key_Escape)
    assert "plan" not in active_window.waiting_for
    assert not active_window.controls.cancel_button.isVisible()
    assert "Planning cancelled" in active_window.statusBar().currentMessage()
    qtbot.waitUntil(lambda: plans.pid != child, timeout=10_000)  # the child was stopped
    qtbot.wait(300)
    assert shown == []  # nothing half-made is shown
    with qtbot.waitSignal(active_window.plan_shown, timeout=120_000) as done:
        active_window.strategy_box.setCurrentIndex(active_window.strategy_box.findData("tail"))
    assert done.args[0].strategy == "tail" and not active_window.waiting_for


def test_esc_while_a_file_is_read_leaves_the_window_as_it_was(qtbot, active_window: MainWindow,
                                                              big_file: Path) -> None:  # fmt: skip
    active_window.open_document(big_file)
    assert "open" in active_window.waiting_for
    QTest.keyClick(active_window, Qt.Key.Key_Escape)
    assert not active_window.waiting_for
    qtbot.wait(2000)  # the read finishes in the background and is dropped
    assert active_window.session.document is None and active_window.windowTitle() == "ContextLens"
    assert not active_window.waiting_for
