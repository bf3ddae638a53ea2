"""The engine's one serial owner on the Qt side: a QObject living on its own QThread.

The window never calls the engine directly (a model load or a tokenization of a long document
would freeze it); it emits requests, this worker runs them one at a time off the GUI thread, and
answers with signals that Qt delivers back on the GUI thread.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, QThread, Signal, Slot

from app.core.engine.host import EngineHost
from app.core.engine.protocol import EngineError, LoadSettings


class EngineWorker(QObject):
    model_loaded = Signal(object, object)  # ModelInfo, LoadedModel
    tokens_counted = Signal(int, int)  # tokens, characters
    failed = Signal(str)
    status = Signal(str)

    def __init__(self) -> None:
        super().__init__()
        self._host = EngineHost()

    @Slot(str, object)
    def load_model(self, path: str, settings: LoadSettings) -> None:
        self.status.emit(self.tr("Loading model…"))
        try:
            loaded = self._host.load(path, settings)
        except (EngineError, ValueError) as exc:
            self.failed.emit(str(exc))
            return
        self.model_loaded.emit(self._host.model_info, loaded)

    @Slot(str)
    def count_tokens(self, text: str) -> None:
        self.status.emit(self.tr("Counting tokens…"))
        try:
            n = len(self._host.tokenize(text, add_special=False))
        except (EngineError, ValueError) as exc:
            self.failed.emit(str(exc))
            return
        self.tokens_counted.emit(n, len(text))

    @Slot()
    def shutdown(self) -> None:
        self._host.close()


class EngineThread(QObject):
    """Starts the worker on a QThread and stops both cleanly."""

    request_load = Signal(str, object)
    request_count = Signal(str)
    _request_shutdown = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.thread = QThread()
        self.thread.setObjectName("contextlens-engine")
        self.worker = EngineWorker()
        self.worker.moveToThread(self.thread)
        self.request_load.connect(self.worker.load_model)
        self.request_count.connect(self.worker.count_tokens)
        self._request_shutdown.connect(self.worker.shutdown)
        self.thread.start()

    def stop(self) -> None:
        if self.thread.isRunning():
            self._request_shutdown.emit()
            self.thread.quit()
            self.thread.wait(10_000)
