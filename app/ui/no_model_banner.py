"""The line across the top of the window while there is no model: what to do, in one sentence,
with the button that does it.

A first start has no model (models are not bundled). The model panel's own button and a status
line were easy to miss, and Run then answered with a question box; this says it where a person
looks first, and goes away once a model is loaded or a server connected.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QFrame, QHBoxLayout, QPushButton, QWidget

from app.core.default_model import DEFAULT_MODEL
from app.ui.i18n import FollowsLanguage
from app.ui.widgets import plain_label


class NoModelBanner(FollowsLanguage, QFrame):
    """"No model yet…" with Get the Default Model… (``fetch_requested``), or, when models were
    found on this computer, Choose a Model (``choose_requested``)."""

    fetch_requested = Signal()
    choose_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("no-model-banner")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setAutoFillBackground(True)
        self.setBackgroundRole(QPalette.ColorRole.AlternateBase)
        self.text = plain_label()
        self.text.setWordWrap(True)
        self.button = QPushButton()
        self.button.clicked.connect(self._on_clicked)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 6, 12, 6)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.button)
        self._found = 0  # models found on this computer (0: none, so offer the default one)
        self.retranslate()

    def set_found(self, found: int) -> None:
        """How many models the model list holds: none, and the banner offers the default one."""
        self._found = found
        self.retranslate()

    def retranslate(self) -> None:
        if self._found:
            self.text.setText(self.tr(
                "No model is loaded: {0} model(s) found on this computer; choose one in the "
                "model panel, then Load.").format(self._found))  # fmt: skip
            self.button.setText(self.tr("Choose a Model"))
        else:
            self.text.setText(self.tr(
                "No model yet: ContextLens needs a GGUF model to answer; get the default one "
                "({0:,.0f} MB) or drop a .gguf file on the window.").format(
                DEFAULT_MODEL.size / 1e6))  # fmt: skip
            self.button.setText(self.tr("Get the Default Model…"))

    def _on_clicked(self) -> None:
        (self.choose_requested if self._found else self.fetch_requested).emit()
