"""The files a person hands the main window, and what each becomes.

A file comes from File ▸ Open (or the start page's Open), from a drop on the window, from the
command line or from a later launch (second_launch.py): a ``.gguf`` is chosen as the model, a
``.ctxlens`` session export is imported into the history, anything else opens as the document
(read in the background by the session model, then shown and planned).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, QSettings
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QFileDialog, QTabWidget, QWidget

from app.ui.history_panel import SUFFIX as SESSION_SUFFIX
from app.ui.history_panel import HistoryPanel
from app.ui.model_panel import ModelPanel
from app.ui.session_model import SessionModel


class WindowFiles(QObject):
    """Opens files for ``window``: documents through ``session``, models in ``model_panel``,
    session exports in ``history`` (None: the history could not be opened, for the reason
    ``store_problem`` gives), brought to the front of ``tabs``."""

    def __init__(self, window: QWidget, settings: QSettings, session: SessionModel, *,
                 model_panel: ModelPanel, tabs: QTabWidget, history: HistoryPanel | None,
                 store_problem: str) -> None:  # fmt: skip
        super().__init__(window)
        self._window, self._settings, self._session = window, settings, session
        self._model_panel, self._tabs, self._history = model_panel, tabs, history
        self._store_problem = store_problem

    def choose_document(self) -> None:
        """File ▸ Open: a document chosen in the file dialog, from the folder used last."""
        start = str(self._settings.value("last_folder", ""))  # MainActions.remember sets it
        path, _ = QFileDialog.getOpenFileName(self._window, self.tr("Open Document"), start)
        if path:
            self._session.open_document(Path(path))

    def open_path(self, path: Path) -> None:
        """A file from the command line, a second launch or a drop: a ``.gguf`` is chosen as
        the model, a ``.ctxlens`` session export is imported into the history, anything else
        opens as the document."""
        suffix = path.suffix.lower()
        if suffix == ".gguf":
            self._model_panel.select_model(path)
        elif suffix == SESSION_SUFFIX:
            if self._history is None:
                self._session.fail(self.tr("{0} cannot be imported: {1}").format(
                    path.name, self._store_problem))  # fmt: skip
                return
            self._tabs.setCurrentWidget(self._history)
            self._history.import_file(path)
        else:
            self._session.open_document(path)

    @staticmethod
    def drag_enter(event: QDragEnterEvent) -> None:
        """A drag over the window is welcome when it carries a local file."""
        if any(url.isLocalFile() for url in event.mimeData().urls()):
            event.acceptProposedAction()

    def drop(self, event: QDropEvent) -> None:
        """The first local file dropped opens as open_path opens it."""
        for url in event.mimeData().urls():
            if url.isLocalFile():
                self.open_path(Path(url.toLocalFile()))
                event.acceptProposedAction()
                return
