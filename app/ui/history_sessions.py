"""The History panel's choice of session: "Session:", the sessions (each with its size, or all
of them) and Refresh.

:class:`SessionChooser` lists the sessions of the last reading and says which one is shown;
choosing another asks the panel to show it (``chosen``), and the list is worded again in
another language without a new reading.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QWidget

from app.services.history import SessionRow
from app.ui.history_columns import HistoryColumns
from app.ui.i18n import FollowsLanguage


class SessionChooser(FollowsLanguage, QWidget):
    """The session list and Refresh; ``words`` says a session's size."""

    chosen = Signal(object)  # the session to show (an id; None: every session)

    def __init__(self, words: HistoryColumns, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._words = words
        self._sessions: list[SessionRow] = []
        self._shown: int | None = None
        self.combo = QComboBox()
        self.combo.setMinimumContentsLength(24)
        self.combo.activated.connect(self._on_activated)
        self.label = QLabel()
        self.label.setBuddy(self.combo)
        self.refresh_button = QPushButton()
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.label)
        row.addWidget(self.combo, 1)
        row.addWidget(self.refresh_button)
        self.retranslate()

    def retranslate(self) -> None:
        self.label.setText(self.tr("Session:"))
        self.refresh_button.setText(self.tr("Refresh"))
        self.show_sessions(self._sessions, self._shown)

    def show_sessions(self, sessions: list[SessionRow], shown: int | None) -> None:
        """List ``sessions``, ``shown`` chosen (None: every session)."""
        self._sessions, self._shown = sessions, shown
        combo = self.combo
        combo.blockSignals(True)
        combo.clear()
        combo.addItem(self.tr("All sessions"), None)
        for s in sessions:
            size = self._words.versions_count(s.versions)
            combo.addItem(self.tr("{0} (#{1}, {2})").format(s.name, s.id, size), s.id)
        index = combo.findData(shown) if shown is not None else 0
        combo.setCurrentIndex(max(0, index))
        combo.blockSignals(False)

    def _on_activated(self, index: int) -> None:
        self.chosen.emit(self.combo.itemData(index))
