"""The window's search for models: off the GUI thread, and again when a model appears.

Finding models reads folders and GGUF headers (:mod:`app.services.model_library`): seconds the
first time on a machine with many models, so it runs on a pool thread and answers with
``found``. A ``QFileSystemWatcher`` on the folders the search read (the places that exist and
the folders below them where a model would land) starts the next search; events come in bursts
while a file is written or a tool unpacks a model, so the search waits until they pause.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from PySide6.QtCore import QFileSystemWatcher, QObject, QTimer, Signal

from app.core.cancelled import Cancelled
from app.services.model_library import Discovery, find_models, watch_folders
from app.ui.background import run_for

log = logging.getLogger(__name__)

SETTLE_MS = 600  # quiet time after the last change in a watched folder before searching again


def _search(own: Path, stop: threading.Event) -> tuple[Discovery, list[Path]] | None:
    """On the pool thread: the models, and the folders to watch (a stat each of up to the
    walk's 20k folders read, too slow for the GUI thread); None once ``stop`` is set (a newer
    search, or the window closing, made this one pointless)."""
    try:
        discovery = find_models(own, stop=stop.is_set)
        return discovery, watch_folders(discovery, stop=stop.is_set)
    except Cancelled:
        return None


class ModelSearch(QObject):
    """Searches on :meth:`search`, and by itself when a watched folder changes."""

    found = Signal(object)  # Discovery

    def __init__(self, own_folder: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._own = Path(own_folder)
        self._asked = 0  # generation of the newest search; older answers are dropped
        self._stop = threading.Event()  # set: the search under way is no longer wanted
        self.last: Discovery | None = None
        self.watcher = QFileSystemWatcher(self)
        self.watcher.directoryChanged.connect(self._changed)
        self._settle = QTimer(self)
        self._settle.setSingleShot(True)
        self._settle.setInterval(SETTLE_MS)
        self._settle.timeout.connect(self.search)

    def search(self) -> None:
        """Look everywhere again; ``found`` answers on the GUI thread."""
        self._asked += 1
        self.stop()  # the search under way, if any, ends at its next entry
        own, stop = self._own, threading.Event()  # plain values only reach the pool thread
        self._stop = stop
        run_for(self, lambda: _search(own, stop), self._answer, self._asked,
                on_error=self._failed)  # fmt: skip

    def stop(self) -> None:
        """End the search under way at its next entry (its answer is dropped)."""
        self._stop.set()

    def _answer(self, generation: int,
                answer: tuple[Discovery, list[Path]] | None) -> None:  # fmt: skip
        if generation != self._asked or answer is None:
            return
        discovery, folders = answer
        self.last = discovery
        self._watch(folders)
        self.found.emit(discovery)

    def _failed(self, message: str) -> None:
        log.warning("looking for models failed: %s", message)

    def _watch(self, folders: list[Path]) -> None:
        wanted = {str(f) for f in folders}
        watched = set(self.watcher.directories())
        if watched - wanted:
            self.watcher.removePaths(sorted(watched - wanted))
        if wanted - watched:
            self.watcher.addPaths(sorted(wanted - watched))

    def _changed(self, _folder: str) -> None:
        self._settle.start()  # restarts: searches once the changes pause
