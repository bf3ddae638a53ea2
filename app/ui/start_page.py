"""What the document pane shows before any document is open: what to do first (open a document,
or the sample), the files opened lately, and that a file can be dropped on the window. A blank
pane said nothing, and Run then answered with an error box."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.ui.i18n import FollowsLanguage
from app.ui.widgets import plain_label

_PATH_ROLE = Qt.ItemDataRole.UserRole


class StartPage(FollowsLanguage, QWidget):
    """Open a document, open the sample, or one of the recent files (``recent_chosen``)."""

    open_requested = Signal()
    sample_requested = Signal()
    recent_chosen = Signal(object)  # Path

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.heading = QLabel()
        font = self.heading.font()
        font.setPointSizeF(font.pointSizeF() * 1.4)
        font.setBold(True)
        self.heading.setFont(font)
        self.heading.setWordWrap(True)
        self.hint = QLabel()
        self.hint.setWordWrap(True)
        self.open_button = QPushButton()
        self.open_button.clicked.connect(self.open_requested)
        self.sample_button = QPushButton()
        self.sample_button.clicked.connect(self.sample_requested)
        self.recent_label = QLabel()
        self.recent = QListWidget()
        self.recent.itemActivated.connect(self._on_activated)
        self.recent.setMaximumHeight(self.fontMetrics().height() * 12)
        self.drop_hint = plain_label()
        self.drop_hint.setWordWrap(True)

        buttons = QHBoxLayout()
        buttons.addWidget(self.open_button)
        buttons.addWidget(self.sample_button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(24, 24, 24, 24)
        layout.addWidget(self.heading)
        layout.addWidget(self.hint)
        layout.addLayout(buttons)
        layout.addSpacing(12)
        layout.addWidget(self.recent_label)
        layout.addWidget(self.recent)
        layout.addWidget(self.drop_hint)
        layout.addStretch(1)  # all of it at the top, the room below
        self.set_recent([])
        self.retranslate()

    def retranslate(self) -> None:
        self.heading.setText(self.tr("Open a document to see what reaches the model"))
        self.hint.setText(self.tr(
            "ContextLens shows which parts of a long document fit the model's context, how "
            "they sit in its KV cache, and where each part of the answer came from."))  # fmt: skip
        self.open_button.setText(self.tr("Open a Document…"))
        self.sample_button.setText(self.tr("Open the Sample"))
        self.recent_label.setText(self.tr("Recent documents:"))
        self.drop_hint.setText(self.tr("Or drop a file on the window: a document opens, a "
                                       ".gguf model is chosen, a .ctxlens session is "
                                       "imported."))  # fmt: skip

    def set_recent(self, paths: list[str]) -> None:
        """The files opened lately, newest first (double-click or Enter opens one)."""
        self.recent.clear()
        for entry in paths:
            item = QListWidgetItem(Path(entry).name)
            item.setToolTip(entry)
            item.setData(_PATH_ROLE, entry)
            self.recent.addItem(item)
        self.recent.setVisible(bool(paths))
        self.recent_label.setVisible(bool(paths))

    def _on_activated(self, item: QListWidgetItem) -> None:
        self.recent_chosen.emit(Path(str(item.data(_PATH_ROLE))))
