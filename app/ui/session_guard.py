"""What the next start finds of this one: the job's choices and the context size always, and
after an unclean exit the offer to bring the whole of the last session back.

While the window is open, a lock file in the user state folder names this process (QLockFile:
pid, program name, host and boot). A clean close removes it; a crash, a kill or a power cut
leaves it behind, and the next start finds a lock whose process is gone. Meanwhile the window's
"last session" (document, model and context or the server connected to, task, strategy,
question, reply size and the history session shown) is kept in its settings under
``last-session/`` as it changes. Every start opens on its task, strategy, question and reply
size and loads the model at its context (:func:`restore_choices`, :meth:`SessionGuard.context`;
the command line wins); after an unclean exit the start also offers to open the document, the
model and the history session again through the window's own public methods.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import platformdirs
from PySide6.QtCore import QCoreApplication, QLockFile, QSettings, Qt
from PySide6.QtWidgets import QMessageBox

from app.core import config
from app.core.engine.types import LoadSettings
from app.core.paths import APP_NAME
from app.ui.widgets import plain_message_box

if TYPE_CHECKING:
    from app.ui.main_window import MainWindow

log = logging.getLogger(__name__)
STATE_ENV = config.STATE_ENV  # another state folder (tests, a second profile)
PREFIX = "last-session/"
LOCK_NAME = "session.lock"
_NUMBERS = frozenset({"n_ctx", "max_tokens", "history_session"})


def state_dir() -> Path:
    """Per-user state that outlives a run but is no user data: the session lock, the key of
    the single-instance socket. Never beside the code."""
    return config.current().state or Path(platformdirs.user_state_dir(APP_NAME))


@dataclass(frozen=True)
class LastSession:
    """What the person was working on, as plain values (empty strings / None: nothing)."""

    document: str = ""
    model: str = ""
    n_ctx: int | None = None  # the model's context, or the one asked of a server (None: its own)
    server: str = ""  # the server jobs ran on instead of a model loaded here
    server_model: str = ""  # the model asked of that server ("": the first it lists)
    task: str = ""
    strategy: str = ""
    question: str = ""
    max_tokens: int | None = None
    history_session: int | None = None

    @classmethod
    def read(cls, settings: QSettings) -> LastSession:
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = settings.value(PREFIX + f.name)
            if raw in (None, ""):
                continue
            if f.name in _NUMBERS:
                try:
                    values[f.name] = int(raw)
                except (TypeError, ValueError):  # a hand-edited settings file: skip the key
                    continue
            else:
                values[f.name] = str(raw)
        return cls(**values)

    def write(self, settings: QSettings) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value in (None, ""):
                settings.remove(PREFIX + f.name)
            else:
                settings.setValue(PREFIX + f.name, value)

    def is_empty(self) -> bool:
        return not (self.document or self.model or self.server)


# A first start opens on what the user guide recommends: a question, answered under retrieve
FIRST_START = LastSession(task="ask", strategy="retrieve")


def capture(window: MainWindow) -> LastSession:
    """The window's last session as it is now."""
    document, model = window.document_path, window.model_path
    history = window.history.session_id() if window.history is not None else None
    server, loaded = window.model_panel.server, window.session.loaded
    n_ctx = None
    if model is not None:  # the context loaded, else the one the next Load asks for
        n_ctx = loaded.n_ctx if loaded is not None else window.model_panel.n_ctx.value()
    if server.connected:
        n_ctx = server.n_ctx.value() or None
    return LastSession(
        document=str(document) if document is not None else "",
        model=str(model) if model is not None else "",
        n_ctx=n_ctx,
        server=server.url.text() if server.connected else "",
        server_model=server.model.text() if server.connected else "",
        task=str(window.task_box.currentData() or ""),
        strategy=str(window.strategy_box.currentData() or ""),
        question=window.question.text(),
        max_tokens=window.max_tokens.value(),
        history_session=history,
    )


def save(window: MainWindow, settings: QSettings | None = None) -> None:
    capture(window).write(settings if settings is not None else window.settings)


def restore_choices(window: MainWindow, last: LastSession) -> None:
    """The toolbar takes ``last``'s task, strategy, question and reply size (a task or strategy
    this version does not know is left as it is)."""
    for box, value in ((window.task_box, last.task), (window.strategy_box, last.strategy)):
        index = box.findData(value) if value else -1
        if index >= 0:
            box.setCurrentIndex(index)
    window.question.setText(last.question)
    if last.max_tokens is not None:
        window.max_tokens.setValue(last.max_tokens)


def restore(window: MainWindow, last: LastSession) -> list[str]:
    """Open ``last`` again in ``window``; returns one sentence for each part that is gone."""
    missing: list[str] = []
    restore_choices(window, last)
    if last.history_session is not None and window.history is not None:
        window.history.set_session(last.history_session)
    if last.server:  # an unreachable server says so in the Server box, as a connect does
        window.model_panel.server.connect_to(last.server, n_ctx=last.n_ctx,
                                             model=last.server_model or None)  # fmt: skip
    elif last.model:
        model = Path(last.model)
        n_ctx = last.n_ctx or window.model_panel.n_ctx.value()
        if not model.is_file():
            missing.append(
                QCoreApplication.translate(
                    "SessionGuard", "The model {0} is no longer there."
                ).format(model)
            )
        elif window.model_path != model or window.model_panel.n_ctx.value() != n_ctx:
            window.model_panel.select_model(model)
            window.load_model(model, LoadSettings(n_ctx=n_ctx))
    if last.document:
        document = Path(last.document)
        if document.is_file():
            if window.document_path != document:
                window.open_document(document)
        else:
            missing.append(
                QCoreApplication.translate(
                    "SessionGuard", "The document {0} is no longer there."
                ).format(document)
            )
    return missing


class SessionLock:
    """The lock held while the window is open; ``unclean`` when the last one was left behind
    by a process that is gone."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or state_dir() / LOCK_NAME
        self._lock: QLockFile | None = None
        self.held = False
        self.unclean = False

    def acquire(self) -> bool:
        """Take the lock. False when another live process holds it (a second window) or the
        state folder cannot be written; then nothing is tracked and nothing is offered."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.warning("no session lock: %s", exc)
            return False
        lock = QLockFile(str(self.path))
        lock.setStaleLockTime(0)  # stale only when its process is gone, never by age
        left_behind = self.path.exists()
        if not lock.tryLock(0) and left_behind and not _names_a_process(self.path):
            # a lock file cut short (a power cut while it was written): no process to ask
            lock.removeStaleLockFile()
            lock.tryLock(0)
        self.held = lock.isLocked()
        if not self.held:
            if lock.error() != QLockFile.LockError.LockFailedError:
                log.warning("no session lock at %s (%s)", self.path, lock.error().name)
            return False
        self._lock = lock
        self.unclean = left_behind  # a live holder would have kept the lock
        return True

    def release(self) -> None:
        if self._lock is not None:
            self._lock.unlock()
            self._lock = None
        self.held = False


def _names_a_process(path: Path) -> bool:
    """Whether the lock file starts with a process id, as QLockFile writes it."""
    try:
        with path.open("rb") as f:
            first = f.readline(32).strip()
    except OSError:
        return True  # unreadable is not cut short: leave it to QLockFile
    return first.isdigit() and int(first) > 0


class SessionGuard:
    """Holds the lock for one window, keeps its last session, and offers it back after an
    unclean exit."""

    def __init__(self, settings: QSettings, lock: SessionLock | None = None) -> None:
        self.settings = settings
        self.lock = lock or SessionLock()
        self.previous = LastSession.read(settings)  # before this run writes over it
        self.offer: QMessageBox | None = None
        self._window: MainWindow | None = None

    def start(self) -> bool:
        """Take the lock; True when this run owns the last session."""
        return self.lock.acquire()

    @property
    def unclean(self) -> bool:
        return self.lock.unclean

    def choices(self) -> LastSession:
        """What the toolbar opens on: the last session's choices, or on a first start (none
        kept yet) FIRST_START."""
        return self.previous if self.previous.task else FIRST_START

    def context(self, model: Path | None) -> int | None:
        """The context the last session loaded ``model`` at (None: it had another model, a
        server, or none): context sizes differ from one model to the next."""
        last = self.previous
        if model is None or not last.model or last.server or last.n_ctx is None:
            return None
        return last.n_ctx if Path(last.model).resolve() == model.resolve() else None

    def attach(self, window: MainWindow, *, offer: bool = True) -> QMessageBox | None:
        """Keep ``window``'s last session and release the lock when it closes. After an
        unclean exit (and with ``offer``), ask whether to restore the previous one: tracking
        starts once the person has answered, so the question's answer is not written over."""
        if not self.lock.held:
            return None
        self._window = window
        window.closed.connect(self._closed)
        if offer and self.unclean and not self.previous.is_empty():
            self.offer = self._ask(window)
            return self.offer
        self._track()
        return None

    def _ask(self, window: MainWindow) -> QMessageBox:
        last = self.previous
        question = QCoreApplication.translate(
            "SessionGuard",
            "ContextLens did not close properly last time. Open what you were working on again?",
        )
        box = QMessageBox(QMessageBox.Icon.Question, "ContextLens", question,
                          QMessageBox.StandardButton.NoButton, window)  # fmt: skip
        plain_message_box(box)  # it names the last document and model
        lines = []
        if last.document:
            line = QCoreApplication.translate("SessionGuard", "Document: {0}")
            lines.append(line.format(last.document))
        if last.model:
            line = QCoreApplication.translate("SessionGuard", "Model: {0}")
            lines.append(line.format(last.model))
        if last.server:
            line = QCoreApplication.translate("SessionGuard", "Server: {0}")
            lines.append(line.format(last.server))
        box.setInformativeText("\n".join(lines))
        restore_button = box.addButton(QCoreApplication.translate("SessionGuard", "&Restore"),
                                       QMessageBox.ButtonRole.AcceptRole)  # fmt: skip
        box.addButton(QCoreApplication.translate("SessionGuard", "Start &Fresh"),
                      QMessageBox.ButtonRole.RejectRole)  # fmt: skip
        box.setDefaultButton(restore_button)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)

        def answered() -> None:
            chosen = box.clickedButton() is restore_button
            self.offer = None
            if chosen and self._window is not None:
                missing = restore(self._window, last)
                if missing:
                    self._window.statusBar().showMessage(" ".join(missing))
            self._track()

        box.finished.connect(answered)
        box.open()  # window-modal, never blocks the event loop
        return box

    def _track(self) -> None:
        window = self._window
        if window is None:
            return
        self._save()
        for signal in (window.ready, window.plan_shown, window.job_finished,
                       window.session.model_loaded,
                       window.task_box.currentIndexChanged,
                       window.strategy_box.currentIndexChanged, window.question.textChanged,
                       window.max_tokens.valueChanged):  # fmt: skip
            signal.connect(self._save)
        if window.history is not None:
            window.history.refreshed.connect(self._save)

    def _save(self, *_args: object) -> None:
        if self._window is not None:
            save(self._window, self.settings)

    def _closed(self) -> None:
        """A clean close: the last session as it ends, then the lock goes."""
        if self.offer is None:
            self._save()
        self._window = None
        self.settings.sync()
        self.lock.release()
