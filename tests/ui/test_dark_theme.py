"""Every pane follows the theme, also when View ▸ Theme switches it while the window is open:
the thread's entries and links, the charts and the KV cache's legend (issue 49, row 7).

Qt writes the colours of HTML into the document when it reads it, so a pane that builds HTML
kept the old theme's band and link colours after a switch (white bands behind near-white text,
dark blue links on black)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pyqtgraph as pg
import pytest
from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor, QImage, QPalette
from PySide6.QtWidgets import QApplication, QLabel, QWidget

from app.services.versions import Turn
from app.ui.kv_stage import KVStage
from app.ui.main_window import MainWindow
from app.ui.theme import apply_theme
from app.ui.thread_view import OBJECT_NAME, ThreadView

pytestmark = pytest.mark.window

TURNS = [
    Turn(4, 1, "Where is the harbour?", "In the north, past the mill.", "stop", "head"),
    Turn(7, 2, "When do boats leave?", "At dawn,\nmostly.", "length", "retrieve"),
]
DARK_MOST = 0.3  # the most luminance a background may have in the dark theme
LIGHT_LEAST = 0.7  # the least in the light theme
TEXT_CONTRAST = 4.5  # WCAG AA for body text
LINK_CONTRAST = 3.0  # WCAG AA for large or bold text (the links are bold)


def luminance(colour: QColor) -> float:
    """WCAG's relative luminance of ``colour``."""

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in (colour.redF(), colour.greenF(), colour.blueF()))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: QColor, b: QColor) -> float:
    """WCAG's contrast ratio of two colours (1 to 21)."""
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def background(image: QImage, rect: QRect) -> QColor:
    """The commonest colour in ``rect`` of ``image``: what the text there is drawn on."""
    rect = rect.intersected(image.rect())
    pixels = Counter(image.pixel(x, y) for y in range(rect.top(), rect.bottom() + 1)
                     for x in range(rect.left(), rect.right() + 1))  # fmt: skip
    return QColor.fromRgb(pixels.most_common(1)[0][0])


@pytest.fixture
def themed(qapp: QApplication) -> Iterator[QApplication]:
    """The application, its theme set back to the platform's look afterwards."""
    yield qapp
    apply_theme(qapp, "system")


def switch(qtbot, app: QApplication, name: str, widget: QWidget) -> None:
    """Theme ``name`` applied as View ▸ Theme applies it; the widgets hear of it through the
    event loop, ``widget`` among them."""
    apply_theme(app, name)
    base = app.palette().color(QPalette.ColorRole.Base)
    qtbot.waitUntil(lambda: widget.palette().color(QPalette.ColorRole.Base) == base)
    qtbot.wait(10)  # the rest of the window with it


def assert_thread_reads(view: ThreadView, dark: bool) -> None:
    """Each entry of ``view`` as drawn: its background as dark (or light) as the theme, its
    text and its links readable on it."""
    browser = view.browser
    image = browser.viewport().grab().toImage()
    doc, offset = browser.document(), browser.verticalScrollBar().value()
    text = browser.palette().color(QPalette.ColorRole.Text)
    block, entries = doc.begin(), 0
    while block.isValid():
        if block.text().strip():
            rect = doc.documentLayout().blockBoundingRect(block).toRect().translated(0, -offset)
            ground = background(image, rect)
            where = f"{block.text()!r}: background {ground.name()}"
            assert (luminance(ground) < DARK_MOST) if dark else \
                (luminance(ground) > LIGHT_LEAST), where  # fmt: skip
            it = block.begin()
            while not it.atEnd():
                fmt = it.fragment().charFormat()
                brush = fmt.foreground()
                colour = brush.color() if brush.style() != Qt.BrushStyle.NoBrush else text
                least = LINK_CONTRAST if fmt.isAnchor() else TEXT_CONTRAST
                assert contrast(colour, ground) >= least, (where, colour.name(), fmt.isAnchor())
                it += 1
            entries += 1
        block = block.next()
    assert entries >= 6  # each turn's heading, answer and finish line were looked at


def test_the_thread_follows_a_switch_to_the_dark_theme_and_back(qtbot, themed) -> None:
    apply_theme(themed, "light")  # before the view is made
    view = ThreadView()
    qtbot.addWidget(view)
    view.resize(420, 460)
    view.set_turns(TURNS, current=7)  # the second turn marked with a band
    view.show()
    qtbot.waitExposed(view)
    assert view.objectName() == OBJECT_NAME and view.browser.objectName()
    assert_thread_reads(view, dark=False)
    switch(qtbot, themed, "dark", view)
    assert_thread_reads(view, dark=True)
    switch(qtbot, themed, "light", view)
    assert_thread_reads(view, dark=False)


def test_the_charts_and_the_kv_legend_follow_a_switch_to_the_dark_theme(
    qtbot, themed, empty_window: MainWindow
) -> None:
    switch(qtbot, themed, "dark", empty_window)
    plots = empty_window.findChildren(pg.PlotWidget)
    assert len(plots) >= 3  # the gauges' two and the document's chunk histogram
    for plot in plots:
        roles = (QPalette.ColorRole.Base, QPalette.ColorRole.Window)
        grounds = {plot.palette().color(role).rgb() for role in roles}
        corner = plot.grab().toImage().pixel(2, 2)  # outside the axes and the title
        assert corner in grounds, f"a chart's background is {QColor.fromRgb(corner).name()}"
        axis = plot.getPlotItem().getAxis("bottom")
        assert contrast(axis.textPen().color(), QColor.fromRgb(corner)) >= TEXT_CONTRAST
    legend = empty_window.findChild(KVStage).findChildren(QLabel)
    swatches = [s for s in legend if s.text() == "" and s.width() <= 16 and s.isVisible()]
    assert len(swatches) == 7  # one per kind of segment, "free" last
    free = swatches[-1].grab().toImage().pixel(6, 6)
    assert luminance(QColor.fromRgb(free)) < DARK_MOST, "the free swatch stayed light"
