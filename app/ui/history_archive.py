"""The History panel's archive: a session written to a ``.ctxlens`` file, and one added from it.

Both run on a pool thread (``services.history.export_session`` / ``import_session``), one at a
time, behind a progress dialog that shows itself after a moment and can be cancelled: a
cancelled export leaves no file (an earlier one untouched), a cancelled import adds nothing.
:class:`SessionArchive` asks for the file, runs the operation and says how it went; the panel
redraws from what it reports (``exported``, ``imported``) and shows what it says.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from PySide6.QtCore import QLocale, QObject, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

from app.services.history import (  # by name: tests hold them mid-way
    Cancelled,
    Exported,
    History,
    Imported,
    export_session,
    import_session,
)
from app.ui.background import Progress, run_for
from app.ui.operation_progress import OperationProgress

SUFFIX = ".ctxlens"
T = TypeVar("T")


def _unless_cancelled(call: Callable[[], T]) -> T | None:
    """``call()``, or None when the person cancelled it: not a failure, nothing changed."""
    try:
        return call()
    except Cancelled:
        return None


class SessionArchive(QObject):
    """Export and import for ``parent`` (the History panel: their dialogs' parent)."""

    exported = Signal(object)  # Exported: the file is written (nothing changed in the history)
    imported = Signal(object)  # Imported: the session added, with its versions
    cancelled = Signal(str)  # an export or import was cancelled: the sentence to show
    failed = Signal(str)  # one sentence
    said = Signal(str)  # what to tell the person, not a failure
    busy_changed = Signal()  # an operation began or ended: whether another may start changed

    def __init__(self, store: History, parent: QWidget) -> None:
        super().__init__(parent)
        self._store = store
        self._operation = OperationProgress(parent)
        self._operation.changed.connect(self.busy_changed)
        self._operation.cancelling.connect(self._on_cancelling)
        self.progress = self._operation.dialog

    def retranslate(self) -> None:
        """The progress dialog's words in the language now installed (the panel calls this)."""
        self.progress.setWindowTitle(self.tr("ContextLens"))
        self.progress.setCancelButtonText(self.tr("Cancel"))

    @property
    def busy(self) -> bool:
        """An export or import is running: another waits until it has ended."""
        return self._operation.waiting is not None

    def export_session(self, session_id: int, name: str, *, include_kv: bool) -> None:
        """Ask for a file (named after the session, ``name``), then write the session to it in
        the background."""
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "session"
        chosen, _ = QFileDialog.getSaveFileName(
            self._window(), self.tr("Export Session"), str(Path.home() / f"{safe}{SUFFIX}"),
            self.tr("ContextLens sessions (*.ctxlens)"),
        )  # fmt: skip
        if not chosen:
            return
        path = Path(chosen)
        if path.suffix.lower() != SUFFIX:
            path = path.with_name(path.name + SUFFIX)
        store = self._store
        wait = self._operation.start(self.tr("Exporting the session to {0}…").format(path.name))

        def work() -> Exported | None:  # holds plain values only (see _background)
            return _unless_cancelled(lambda: export_session(
                store, session_id, path, include_kv=include_kv, progress=wait.report,
                cancel=wait.cancel))  # fmt: skip

        self._background(work, self._on_exported, path, wait=wait)

    def _on_exported(self, path: Path, done: Exported | None) -> None:
        if done is None:
            self._cancelled(
                self.tr("Export to {0} cancelled; no file was written and nothing changed.")
                .format(path.name)
            )  # fmt: skip
            return
        summary = done.summary
        self.said.emit(
            self.tr("Exported {0} versions, {1} runs and {2} KV states to {3} "
                    "({4}).").format(
                summary.versions, summary.runs, summary.kv_states, summary.path,
                QLocale().formattedDataSize(summary.bytes))
        )  # fmt: skip
        self.exported.emit(done)

    def choose_import(self) -> None:
        """Ask for a .ctxlens file, then add it as a new session in the background."""
        chosen, _ = QFileDialog.getOpenFileName(
            self._window(), self.tr("Import Session"), str(Path.home()),
            self.tr("ContextLens sessions (*.ctxlens);;All files (*)"),
        )  # fmt: skip
        if chosen:
            self.import_file(Path(chosen))

    def import_file(self, path: Path) -> None:
        """Add the session exported in ``path`` as a new session, in the background (also for
        a .ctxlens file opened from the command line or a second launch)."""
        if self._store.read_only:
            self.failed.emit(self.tr("This history is read-only: {0} cannot be imported.")
                             .format(path.name))  # fmt: skip
            return
        if self.busy:
            self.failed.emit(self.tr("An export or import is running: open {0} again when it "
                                     "has finished.").format(path.name))  # fmt: skip
            return
        store = self._store
        wait = self._operation.start(self.tr("Importing {0}…").format(path.name))

        def work() -> Imported | None:  # holds plain values only (see _background)
            return _unless_cancelled(lambda: import_session(
                store, path, progress=wait.report, cancel=wait.cancel))  # fmt: skip

        self._background(work, self._on_imported, path, wait=wait)

    def _on_imported(self, path: Path, done: Imported | None) -> None:
        if done is None:
            self._cancelled(
                self.tr("Import of {0} cancelled; nothing changed in the history.")
                .format(path.name)
            )  # fmt: skip
            return
        summary = done.summary
        self.said.emit(
            self.tr("Imported {0} as session #{1}: {2} versions, {3} runs, {4} KV states.")
            .format(path.name, summary.session_id, summary.versions, summary.runs,
                    summary.kv_states)
        )  # fmt: skip
        self.imported.emit(done)

    def _window(self) -> QWidget | None:
        """The panel: the file dialogs' parent (not held here: it holds this object)."""
        parent = self.parent()
        return parent if isinstance(parent, QWidget) else None

    def _cancelled(self, text: str) -> None:
        self.said.emit(text)
        self.cancelled.emit(text)

    def _on_cancelling(self) -> None:
        self.said.emit(self.tr("Cancelling…"))

    def _background(self, work: Callable[[], object], handler: Callable[..., None], path: Path,
                    *, wait: Progress) -> None:  # fmt: skip
        """``work()`` on a pool thread, then ``handler(path, result)`` (a method of this object)
        or the error (``failed``), if this object still exists; ``wait``'s progress dialog ends
        first. ``work`` holds plain values only: the last reference to a Qt object must not go
        on the pool thread."""
        operation = self._operation
        run_for(self, work, handler, path, on_error=self._fail,
                settle=lambda: operation.end(wait))  # fmt: skip

    def _fail(self, message: str) -> None:
        self.failed.emit(message)
