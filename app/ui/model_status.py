"""The status replies: Load and Unload, and the window's answers to them under the buttons.

The panel only asks (``load_requested``, ``unload_requested``); the window owns the engine and
answers: loading, loaded (with the engine's warnings), a server connected, calibrating, or why
it failed. :class:`ModelStatus` keeps what was answered last, and says its status line again
in another language.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from app.core.engine.remote import ServerInfo
from app.core.engine.types import LoadedModel
from app.core.textutil import clip_message
from app.ui.i18n import FollowsLanguage
from app.ui.server_box import ServerBox
from app.ui.widgets import MessageLine, plain_label


def sentence(text: str) -> str:
    """``text`` on one line, ending as a sentence does."""
    text = " ".join(text.split())
    return text if text.endswith((".", "!", "?")) else text + "."


class ModelStatus(FollowsLanguage, QWidget):
    """Load and Unload, the engine's error and the status line under them; what is loaded and
    whether the engine is busy. The server box (laid out by the panel, further down) is told
    when a server connects or goes."""

    def __init__(self, server: ServerBox, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.server = server
        self.loaded: LoadedModel | None = None
        self.busy = False  # the engine loads or unloads: Load and Unload wait
        self._status_text: Callable[[], str] = self._loaded_text  # says the status line
        self.load_button = QPushButton()
        self.load_button.setDefault(True)
        self.unload_button = QPushButton()
        self.status = plain_label()
        self.status.setWordWrap(True)
        self.engine_error = MessageLine()

        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.load_button)
        buttons.addWidget(self.unload_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(buttons)
        layout.addWidget(self.engine_error)
        layout.addWidget(self.status)
        self.retranslate()

    def retranslate(self) -> None:
        self.load_button.setText(self.tr("L&oad"))
        self.unload_button.setText(self.tr("&Unload"))
        self.status.setText(self._status_text())

    def say(self, text: Callable[[], str]) -> None:
        """Show a status line; ``text`` is kept to say it again when the language changes."""
        self._status_text = text
        self.status.setText(text())

    def say_loaded(self) -> None:
        """The status line says what is loaded (or that nothing is)."""
        self.say(self._loaded_text)

    def enable(self, can_load: bool) -> None:
        """Load when ``can_load`` and the engine is free; Unload when a model is loaded."""
        self.load_button.setEnabled(can_load and not self.busy)
        self.unload_button.setEnabled(self.loaded is not None and not self.busy)

    # ----- the answers -----

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        if busy:
            self.say(lambda: self.tr("Loading…"))

    def show_loaded(self, loaded: LoadedModel) -> None:
        self.loaded = loaded
        self.busy = False
        self.engine_error.clear()
        self.say_loaded()

    def show_unloaded(self) -> None:
        self.loaded = None
        self.busy = False
        self.server.show_disconnected()
        self.say_loaded()

    def show_server(self, info: ServerInfo) -> None:
        self.loaded = None
        self.busy = False
        self.engine_error.clear()
        self.server.show_connected(info)
        pool = len(self.server.pool)
        if pool:
            self.say(lambda: self.tr("Connected to a pool of {0} servers: model {1}, "
                                     "context {2:,} tokens.").format(
                pool, info.model, info.n_ctx))  # fmt: skip
            return
        self.say(lambda: self.tr("Connected to {0}: model {1}, context {2:,} tokens.").format(
            info.url, info.model, info.n_ctx))  # fmt: skip

    def show_error(self, message: str) -> None:
        self.busy = False
        self.engine_error.show_message(sentence(message))
        self.say_loaded()

    def show_calibrating(self, done: int, total: int) -> None:
        self.say(lambda: self.tr("Calibrating: {0}/{1} settings tried…").format(done, total))

    def _loaded_text(self) -> str:
        if self.loaded is None:
            return self.tr("No model loaded.")
        text = self.tr("Loaded {0}: context {1:,} tokens.").format(
            Path(self.loaded.path).name, self.loaded.n_ctx
        )
        return " ".join([text, *(clip_message(w) for w in self.loaded.warnings)])
