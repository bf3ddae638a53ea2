"""More servers in the Server box: the addresses of a pool, under the first address.

Several servers that serve the same model make one pool: a job runs on the first that answers
and, when that one stops answering in the middle of it, runs again from its start on the next
(app/services/server_pool.py). The box keeps the first address field as it always was; this
widget adds a line per further server, each with its own Remove button, and an "Add a server"
button under them. It only holds the addresses; the box checks them and connects.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QStyle,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.ui.i18n import FollowsLanguage


class ServerAddresses(FollowsLanguage, QWidget):
    """The further addresses of a pool (none: one server), and the button that adds one."""

    changed = Signal()  # a line added, removed or edited
    submitted = Signal()  # Enter in one of the lines

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._rows: list[tuple[QWidget, QLineEdit, QToolButton]] = []
        self._editable = True
        self._lines = QVBoxLayout()
        self._lines.setContentsMargins(0, 0, 0, 0)
        self.add_button = QPushButton()
        self.add_button.setObjectName("addServer")
        self.add_button.clicked.connect(self._add_focused)
        add_row = QHBoxLayout()
        add_row.addWidget(self.add_button)
        add_row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(self._lines)
        layout.addLayout(add_row)
        self.retranslate()

    def retranslate(self) -> None:
        self.add_button.setText(self.tr("Add a server"))
        self.add_button.setToolTip(self.tr(
            "Another server with the same model and context size: each job runs on the first "
            "that answers, and again from its start on the next when that one stops "
            "answering"))  # fmt: skip
        for number, (_row, field, remove) in enumerate(self._rows, start=2):
            field.setPlaceholderText(self.tr("another server's address"))
            field.setAccessibleName(self.tr("Address {0}").format(number))
            remove.setAccessibleName(self.tr("Remove"))
            remove.setToolTip(self.tr("Remove this server from the pool"))

    # ----- the lines -----

    def add(self, text: str = "") -> QLineEdit:
        """A line for one more server's address, filled with ``text``."""
        row = QWidget()
        field = QLineEdit(text)
        field.textChanged.connect(self.changed)
        field.returnPressed.connect(self.submitted)
        remove = QToolButton()  # an icon: the field keeps the panel's narrow width
        remove.setIcon(self.style().standardIcon(QStyle.StandardPixmap.SP_LineEditClearButton))
        remove.setAutoRaise(True)
        remove.clicked.connect(lambda: self.remove(field))
        line = QHBoxLayout(row)
        line.setContentsMargins(0, 0, 0, 0)
        line.addWidget(field, 1)
        line.addWidget(remove)
        field.setEnabled(self._editable)
        remove.setEnabled(self._editable)
        self._rows.append((row, field, remove))
        self._lines.addWidget(row)
        self._name_rows()
        self.retranslate()
        self.changed.emit()
        return field

    def _add_focused(self) -> None:
        self.add().setFocus()

    def remove(self, field: QLineEdit) -> None:
        """Take the line of ``field`` away (its server leaves the pool)."""
        for i, (row, own, _remove) in enumerate(self._rows):
            if own is field:
                del self._rows[i]
                self._lines.removeWidget(row)
                row.hide()
                row.deleteLater()
                break
        self._name_rows()
        self.retranslate()
        self.changed.emit()

    def _name_rows(self) -> None:
        """Object names by place (the first address is the box's own, number 1)."""
        for number, (_row, field, remove) in enumerate(self._rows, start=2):
            field.setObjectName(f"serverAddress-{number}")
            remove.setObjectName(f"removeServer-{number}")

    @property
    def fields(self) -> list[QLineEdit]:
        return [field for _row, field, _remove in self._rows]

    def texts(self) -> list[str]:
        """The addresses typed, blank lines left out."""
        return [text for field in self.fields if (text := field.text().strip())]

    def set_texts(self, texts: list[str]) -> None:
        """Exactly these further addresses (none: one server)."""
        for field in self.fields:
            self.remove(field)
        for text in texts:
            self.add(text)

    def set_editable(self, editable: bool) -> None:
        """Lines and buttons follow the box: fixed while connecting or connected."""
        self._editable = editable
        self.add_button.setEnabled(editable)
        for _row, field, remove in self._rows:
            field.setEnabled(editable)
            remove.setEnabled(editable)
