"""Small widgets the panels share."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QStyle, QWidget


class MessageLine(QWidget):
    """An inline message with a standard icon: errors and notes without a modal box."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.icon = QLabel()
        self.label = QLabel()
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
