"""The model panel in the window, offscreen (issue 49, rows 3 and 11): a new context size is
offered for a reload right beside its field and loads the real model at that size, and on a
laptop's 1366x768 the fit line and Load show without scrolling the panel."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QRect, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QPushButton, QScrollArea, QSpinBox, QWidget

from tests.ui.windows import Windows


def test_the_reload_beside_the_context_size_loads_the_model_at_it(
    qtbot, make_window: Windows, model_path: Path
) -> None:
    window = make_window(model_path, n_ctx=1024)
    window.show()
    qtbot.waitUntil(lambda: window.session.loaded is not None, timeout=60_000)
    assert window.session.loaded.n_ctx == 1024
    field = window.findChild(QSpinBox, "model-context-size")  # names the xdotool tests use too
    reload = window.findChild(QPushButton, "model-context-reload")
    assert field is window.model_panel.n_ctx and reload is window.model_panel.reload_button
    qtbot.waitUntil(reload.isHidden, timeout=10_000)  # the size shown is the size loaded
    field.setFocus()
    field.lineEdit().selectAll()
    QTest.keyClicks(field.lineEdit(), "2048")
    assert field.value() == 2048
    assert reload.isVisible() and reload.text() == "Reload with 2,048"
    qtbot.mouseClick(reload, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.session.loaded is not None
                    and window.session.loaded.n_ctx == 2048, timeout=60_000)  # fmt: skip
    qtbot.waitUntil(reload.isHidden, timeout=10_000)


def _in_sight(widget: QWidget, area: QScrollArea) -> bool:
    """Whether all of ``widget`` lies within what ``area`` shows now."""
    top_left = widget.mapTo(area.viewport(), widget.rect().topLeft())
    return area.viewport().rect().contains(QRect(top_left, widget.size()))


def test_at_1366x768_the_fit_and_load_show_without_scrolling(qtbot, make_window: Windows) -> None:
    """Issue 49 row 11: the load options and the "Fits" line were two scrolls down the panel."""
    window = make_window()
    window.fit_to(QRect(0, 0, 1366, 768))
    window.show()
    qtbot.waitExposed(window)
    panel = window.model_panel
    qtbot.waitUntil(lambda: panel.memory.text().startswith("Fits: "), timeout=20_000)
    qtbot.waitUntil(lambda: panel.chooser.library is not None, timeout=20_000)  # every source
    qtbot.wait(50)  # the docks settle after the first layout pass
    area = panel.parentWidget().parentWidget()
    assert isinstance(area, QScrollArea) and area.verticalScrollBar().value() == 0
    for part in (panel.n_ctx, panel.memory, panel.load_button):
        assert part.isVisible() and _in_sight(part, area), part


def test_at_1024x700_every_row_of_the_card_is_one_line(qtbot, make_window: Windows) -> None:
    """Issue 49 row 11: in the dock of a small screen the card's name, file, attention and kind
    wrapped to two or three lines each. Each row is one line now, cut with "…" where the dock
    is too narrow, the whole text in its tooltip."""
    window = make_window()
    window.fit_to(QRect(0, 0, 1024, 700))
    window.show()
    qtbot.waitExposed(window)
    card = window.model_panel.card
    qtbot.waitUntil(lambda: card.value("arch") != "–", timeout=20_000)
    qtbot.wait(50)  # the docks settle after the first layout pass
    line = card.fontMetrics().height()
    for key, field in card._fields.items():
        name = card._names[key]
        assert field.height() < 1.5 * line and name.height() < 1.5 * line, (key, field.height())
        assert abs(field.y() - name.y()) < line / 2, key  # beside its name, not under it
    cut = []
    for key, field in card._fields.items():
        if field.is_elided():
            cut.append(key)
            assert field.toolTip().startswith(field.text()), key  # said whole on hover
    assert "file" in cut or card.width() > 400, card.width()  # the file's line is long
