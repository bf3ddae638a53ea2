"""The window at the sizes people's screens have: 1024x700 is usable, 1366x768 comfortable.

Usable means what a person sees: the window fits the screen, the document keeps at least a third
of the width, the docks sit side by side rather than over each other, and no widget a layout
places spills out of its parent or over a sibling (it scrolls or gets smaller instead)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication, QRect, QSettings
from PySide6.QtWidgets import (
    QAbstractButton,
    QDockWidget,
    QLabel,
    QLineEdit,
    QSplitter,
    QToolBar,
    QToolButton,
    QWidget,
)

from app.core.paths import sample_document
from app.ui import i18n
from app.ui.main_window import MainWindow
from app.ui.widgets import ElidedLabel
from tests.ui.layout_probes import name, problems
from tests.ui.windows import Windows


@pytest.mark.parametrize("size", [(1024, 700), (1366, 768)])
def test_the_window_fits_and_nothing_overlaps(make_window: Windows, qtbot, size) -> None:
    window = make_window()  # no model, no document, not shown: sized first
    width, height = size
    window.fit_to(QRect(0, 0, width, height))
    window.show()
    qtbot.waitExposed(window)
    qtbot.wait(50)  # the docks settle after the first layout pass
    assert (window.width(), window.height()) == size  # no minimum larger than the screen
    document = window.document_view
    assert document.width() >= width / 3, document.width()
    docks = [d for d in window.findChildren(QDockWidget) if d.isVisible() and not d.isFloating()]
    assert len(docks) >= 3
    for i, a in enumerate(docks):
        assert window.rect().contains(a.geometry()), name(a)
        for b in docks[i + 1:]:
            assert not a.geometry().intersects(b.geometry()), (name(a), name(b))
        assert not a.geometry().intersects(window.centralWidget().geometry()), name(a)
    # the three-stage buffer runs down the right edge, past the top of the gauges beside it
    stages = window.findChild(QDockWidget, "dock-stages")
    gauges = window.findChild(QDockWidget, "dock-gauges")
    assert stages.geometry().bottom() > gauges.geometry().bottom() - 10
    assert gauges.geometry().right() < stages.geometry().left()
    assert problems(window) == []


def test_a_saved_size_larger_than_the_screen_is_brought_inside_it(
    make_window: Windows, qtbot
) -> None:
    window = make_window()  # no model, no document, not shown: sized first
    window.resize(1600, 1100)
    window.fit_to(QRect(0, 0, 1024, 700))
    assert window.width() <= 1024 and window.height() <= 700


def test_the_panels_splitters_stay_where_the_person_put_them(qtbot, tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    first = MainWindow(None, None, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(first)
    first.show()
    qtbot.waitExposed(first)
    stages = first.findChild(QSplitter, "splitter-stages")
    assert stages is not None
    default = share(stages.sizes())
    total = sum(stages.sizes())
    stages.setSizes([total // 2, total // 4, total - total // 2 - total // 4])
    moved = share(stages.sizes())  # as the minimum sizes let it
    assert abs(moved - default) > 0.1
    first.close()
    again = MainWindow(None, None, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(again)
    again.show()
    qtbot.waitExposed(again)
    restored = share(again.findChild(QSplitter, "splitter-stages").sizes())
    assert abs(restored - moved) < 0.05, (restored, moved, default)  # the dock may differ a bit


def share(sizes: list[int]) -> float:
    """The first pane's share of the splitter."""
    return sizes[0] / sum(sizes)


def clipped(root: QWidget) -> list[str]:
    """Every visible label and button under ``root`` whose text is cut: given less width than
    its text needs, or partly hidden by the panel around it (a scroll area that does not
    scroll sideways cuts off whatever is wider than itself). ElidedLabel shortens itself with
    "…" and a tooltip, by design."""
    found = []
    for w in root.findChildren(QWidget):
        if not w.isVisible() or isinstance(w, ElidedLabel):
            continue
        if not isinstance(w, QLabel | QAbstractButton) or not w.text():
            continue
        if isinstance(w, QLabel) and not w.pixmap().isNull():
            continue
        line = w.text().replace("&", "").split("\n")[0]
        needed = w.fontMetrics().horizontalAdvance(line)
        seen = w.visibleRegion().boundingRect()
        if w.width() < w.minimumSizeHint().width():
            found.append(f"{type(w).__name__} {line[:40]!r}: {w.width()} px of "
                         f"{w.minimumSizeHint().width()}")  # fmt: skip
        elif not seen.isEmpty() and seen.width() < w.width() - 1 and needed > seen.width():
            found.append(f"{type(w).__name__} {line[:40]!r}: {seen.width()} px shown of "
                         f"{w.width()}")  # fmt: skip
    return found


def test_no_text_is_cut_at_either_size_in_either_language(
    qtbot, tmp_path: Path, model_path: Path, compiled: Path
) -> None:
    """The window with a model loaded and a document open, at 1366x768 and 1024x700, in
    English and in Chinese: no label or button shows less than its text. (The model panel's
    card, options and server rows once set its minimum width past its dock, and the dock's
    scroll area cut "Browse…" and the model's name off.)"""
    doc = tmp_path / "doc.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[:12_000], encoding="utf-8")
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w = MainWindow(model_path, doc, n_ctx=1024, db_path=tmp_path / "h.db", settings=settings)
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.ready, timeout=120_000):
        w.show()
    app = QCoreApplication.instance()
    assert app is not None
    found = {}
    try:
        for language in ("en", "zh_CN"):
            assert i18n.install_translator(app, language, folder=compiled) == language
            for size in ((1366, 768), (1024, 700)):
                w.fit_to(QRect(0, 0, *size))
                qtbot.wait(50)  # the docks settle after the first layout pass
                assert (w.width(), w.height()) == size
                found[(language, size)] = clipped(w)
    finally:
        i18n.install_translator(app, i18n.ENGLISH)
    assert all(not cut for cut in found.values()), found
    assert w.model_panel.browse_button.visibleRegion().boundingRect().width() \
        == w.model_panel.browse_button.width()  # fmt: skip


def toolbar_problems(window: MainWindow) -> list[str]:
    """Each action of the job toolbar that a person does not see whole: moved behind the »
    extension button, outside the toolbar, narrower than it asks, or a field narrower than its
    placeholder ("Nee…")."""
    bar = window.findChild(QToolBar, "toolbar-job")
    assert bar is not None
    found = [f"the » button shows: {bar.sizeHint().width()} px wanted of {bar.width()}"
             for b in bar.findChildren(QToolButton)
             if b.objectName() == "qt_toolbar_ext_button" and b.isVisible()]  # fmt: skip
    for action in bar.actions():
        widget = bar.widgetForAction(action)
        if action.isSeparator() or widget is None:
            continue
        label = action.text() or getattr(widget, "text", lambda: "")() or type(widget).__name__
        if not widget.isVisible() or not bar.rect().contains(widget.geometry()):
            found.append(f"{label!r} is not in the toolbar's {bar.width()} px")
        elif isinstance(widget, QLineEdit):
            room = widget.width() - 12  # the frame and the text margins
            needed = widget.fontMetrics().horizontalAdvance(widget.placeholderText())
            if needed > room:
                found.append(f"{widget.placeholderText()!r} needs {needed} px, has {room}")
        elif widget.width() < widget.minimumSizeHint().width():
            found.append(f"{label!r}: {widget.width()} px of {widget.minimumSizeHint().width()}")
    return found


def test_at_1024_the_toolbar_shows_every_action_whole(make_window: Windows, qtbot) -> None:
    """At 1024x700 the job toolbar overflowed: Needles shrank to "Nee…" and Cancel went behind
    the » button. Run and Cancel stay in view, and every other control too."""
    window = make_window()
    window.fit_to(QRect(0, 0, 1024, 700))
    window.show()
    qtbot.waitExposed(window)
    qtbot.wait(50)
    assert toolbar_problems(window) == []
    bar = window.findChild(QToolBar, "toolbar-job")
    for action in (window.run_action, window.cancel_action):
        assert bar.widgetForAction(action).isVisible(), action.text()


def test_at_1024_the_document_keeps_its_lines(
    qtbot, make_window: Windows, model_path: Path, tmp_path: Path
) -> None:
    """With a model loaded and a plan shown, the document pane at 1024x700 showed 16 lines of
    text (12 of the sample's spaced paragraphs): the gauges took a quarter of the height."""
    doc = tmp_path / "doc.txt"
    doc.write_text(sample_document().read_text(encoding="utf-8")[:12_000], encoding="utf-8")
    window = make_window(model_path, doc, 1024)
    window.fit_to(QRect(0, 0, 1024, 700))
    with qtbot.waitSignal(window.plan_shown, timeout=120_000):
        window.show()
    qtbot.wait(50)
    pane = window.document_view.text
    lines = pane.viewport().height() / pane.fontMetrics().lineSpacing()
    assert lines >= 18.5, lines


def test_the_panels_grow_back_when_the_window_is_enlarged(make_window: Windows, qtbot) -> None:
    """From 1024x700 back to 1366x768 the docks kept their small widths and the document took
    all the new room: each dock keeps its share of the window instead."""
    window = make_window()
    window.fit_to(QRect(0, 0, 1024, 700))
    window.show()
    qtbot.waitExposed(window)
    qtbot.wait(50)
    docks = {d.objectName(): d for d in window.findChildren(QDockWidget)}
    small = {name: (d.width(), d.height()) for name, d in docks.items()}
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.width() == 1366)
    qtbot.wait(50)
    grown = 1366 / 1024
    for dock in ("dock-model", "dock-stages"):
        assert docks[dock].width() >= small[dock][0] * grown - 8, (dock, small[dock])
    assert docks["dock-gauges"].height() > small["dock-gauges"][1], small["dock-gauges"]
    document = window.centralWidget().width()
    assert 1366 / 3 <= document <= 1366 * 0.45, document  # its share, not all the new room
