"""A Run without a model: offer the model to load, then run, rather than only refusing.

A person who opens the app and presses Run has said what they want; "load a model first" sent
them looking for a Load button that may be below the fold. The window asks instead: load the
model selected in the model panel (the default model when none is), then run what was asked;
when the default model is not on this computer, fetch it. While a model is still loading the
run simply waits for it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QMessageBox

from app.core.default_model import default_model_path
from app.core.engine.types import LoadSettings
from app.ui.model_panel import ModelPanel
from app.ui.session_model import SessionModel
from app.ui.widgets import plain_message_box

Retry = Callable[[], None]


class OfferingWindow(Protocol):
    """What the offer needs of the main window (named here, not imported: the window
    imports this module)."""

    session: SessionModel
    model_panel: ModelPanel

    @property
    def waiting_for(self) -> frozenset[str]: ...

    def load_model(self, path: Path, settings: LoadSettings) -> None: ...


class ModelOffer(QObject):
    """Answers the session's ``model_needed``: a question with Load (or Get the Default
    Model…), and the run asked for once the model is ready."""

    def __init__(self, window: OfferingWindow) -> None:
        super().__init__(window.session)
        self._window = window
        self.box: QMessageBox | None = None  # the question shown now (tests answer it)
        self._pending: Retry | None = None  # runs once the model being loaded is ready
        window.session.ready.connect(self._on_ready)
        window.session.failed.connect(self._drop)
        window.session.model_unloaded.connect(self._drop)

    def offer(self, retry: Retry) -> None:
        """No model is loaded: wait for the one loading, or ask which to load."""
        window = self._window
        if "load" in window.waiting_for:
            self._pending = retry
            message = self.tr("The model is still loading; the run starts once it is ready.")
            window.session.status.emit(message, 0)
            return
        path = self._model_to_offer()
        if path is not None:
            self._ask_load(path, retry)
        else:
            self._ask_fetch()

    def _model_to_offer(self) -> Path | None:
        """The model panel's selection when it can be loaded, else the default model when it
        is here, else None."""
        panel = self._window.model_panel
        selected = panel.selected_model()
        if selected is not None and selected.is_file() and not panel.error_text():
            return selected
        default = default_model_path()
        return default if default.is_file() else None

    def _ask_load(self, path: Path, retry: Retry) -> None:
        box = self._question(
            self.tr("No model is loaded. Load {0} and run?").format(path.name),
            self.tr("It loads with the context size shown in the model panel."),
        )
        load = box.addButton(self.tr("&Load and Run"), QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(load)

        def answered() -> None:
            self.box = None
            if box.clickedButton() is load:
                self._load(path, retry)

        box.finished.connect(answered)
        box.open()  # window-modal, never blocks the event loop

    def _ask_fetch(self) -> None:
        box = self._question(
            self.tr("No model is loaded, and the default model is not on this computer yet."),
            self.tr("Get it now (about 98 MB, checked against its checksum), then Run again."),
        )
        get = box.addButton(self.tr("&Get the Default Model…"), QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(get)

        def answered() -> None:
            self.box = None
            if box.clickedButton() is get:
                self._window.model_panel.get_default_model()

        box.finished.connect(answered)
        box.open()

    def _question(self, text: str, detail: str) -> QMessageBox:
        box = QMessageBox(QMessageBox.Icon.Question, self.tr("ContextLens"), text,
                          QMessageBox.StandardButton.NoButton,
                          self._window.model_panel.window())  # fmt: skip
        plain_message_box(box)  # it names a model file
        box.setInformativeText(detail)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.box = box
        return box

    def _load(self, path: Path, retry: Retry) -> None:
        """Load ``path`` with the panel's settings (its context at least), then ``retry``."""
        window = self._window
        panel = window.model_panel
        settings = panel.settings()
        if panel.settings_error() or panel.selected_model() != path:
            settings = LoadSettings(n_ctx=settings.n_ctx)
        panel.select_model(path)
        self._pending = retry
        window.load_model(path, settings)

    def _on_ready(self) -> None:
        retry, self._pending = self._pending, None
        if retry is not None:
            retry()

    def _drop(self, *_args: object) -> None:
        """The load failed (or the model went): the run asked for is not made."""
        self._pending = None
