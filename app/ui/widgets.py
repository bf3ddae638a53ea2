"""Small widgets the panels share."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontDatabase, QFontInfo
from PySide6.QtWidgets import QHBoxLayout, QLabel, QMessageBox, QStyle, QWidget


def still_plot(minimum_height: int) -> pg.PlotWidget:
    """A pyqtgraph plot that only shows a figure the app redraws itself: no mouse zoom, no
    auto-range button and no context menu. pyqtgraph's menus (View All, the axes, Export…) and
    its export dialog cannot be translated, and zooming would fight the app's own ranges."""
    plot = pg.PlotWidget()
    plot.setMinimumHeight(minimum_height)
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    # The view passes no mouse or key event to the plot, so no menu can open. (Turning
    # pyqtgraph's menu off instead leaves a ViewBox without one, which crashed a later paint.)
    plot.setInteractive(False)
    scene = plot.scene()
    for action in scene.contextMenu:  # the scene's own "Export..." entry, never reachable now
        action.deleteLater()
    scene.contextMenu.clear()
    return plot


def fixed_font() -> QFont:
    """The system's fixed-pitch font, or the first fixed-pitch family installed when that one
    is not (fontconfig's "monospace" can resolve to a proportional font on a machine with many
    fonts, and a diff or a column of code then loses its columns)."""
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    if QFontInfo(font).fixedPitch():
        return font
    families = [f for f in QFontDatabase.families() if QFontDatabase.isFixedPitch(f)]
    preferred = ("DejaVu Sans Mono", "Liberation Mono", "Noto Sans Mono", "Cascadia Mono")
    for family in (*[f for f in preferred if f in families], *families):
        candidate = QFont(family, font.pointSize())
        if QFontInfo(candidate).fixedPitch():
            return candidate
    return font


def plain_label(text: str = "") -> QLabel:
    """A label that shows its text as written: text from outside the app (error messages, a
    server's reply, file and model names, archive members) could otherwise hold markup that
    QLabel's automatic format renders (a heading, an image, a link)."""
    label = QLabel(text)
    label.setTextFormat(Qt.TextFormat.PlainText)
    return label


def plain_message_box(box: QMessageBox) -> QMessageBox:
    """``box`` with its texts shown as written (see :func:`plain_label`)."""
    box.setTextFormat(Qt.TextFormat.PlainText)
    return box


class MessageLine(QWidget):
    """An inline message with a standard icon: errors and notes without a modal box."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.icon = QLabel()
        self.label = plain_label()
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.icon, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.label, 1)
        self.hide()

    def text(self) -> str:
        return "" if self.isHidden() else self.label.text()

    def show_message(self, text: str, *, error: bool = True) -> None:
        icons = QStyle.StandardPixmap
        pixmap = icons.SP_MessageBoxWarning if error else icons.SP_MessageBoxInformation
        size = self.style().pixelMetric(QStyle.PixelMetric.PM_SmallIconSize)
        self.icon.setPixmap(self.style().standardIcon(pixmap).pixmap(size, size))
        self.label.setText(text)
        self.show()

    def clear(self) -> None:
        self.label.clear()
        self.hide()
