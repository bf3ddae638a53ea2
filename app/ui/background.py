"""Running slow calls off the GUI thread, with the answer delivered back on it.

Store reads and writes, GGUF inspection, planning a large document, export and import: each is
a plain function handed to :func:`run_in_background`; its result or its error comes back as a
signal on the GUI thread, so a handler may touch widgets. An exception is never swallowed: it
reaches ``on_error`` as one sentence. A refusal of what the person handed over (a file that is
not a document, not a model, not an archive) is logged as that sentence, since the person was
told why; anything else is a bug, logged as an error with its traceback.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any
from weakref import WeakMethod

from PySide6.QtCore import QCoreApplication, QObject, QRunnable, QThreadPool, Signal
from shiboken6 import isValid

from app.core.cancelled import Cancelled
from app.core.documents.model import DocumentError
from app.core.engine.gguf_reader import GGUFError
from app.services.errors import ServiceError

log = logging.getLogger(__name__)

# What bad input or the machine's state raises, each said in one sentence: a document, a model
# file or a request the app refuses, a file the system cannot give, an operation cancelled.
REFUSALS = (DocumentError, GGUFError, ServiceError, OSError, Cancelled)


class Progress:
    """One long operation's progress as its worker thread reports it (``report`` is the
    worker's callback), read by a GUI-thread timer, and the event that cancels it. Plain Python
    under a lock, so the worker holds no Qt object."""

    def __init__(self) -> None:
        self.cancel = threading.Event()
        self._lock = threading.Lock()
        self._done = 0
        self._total = 0

    def stop(self) -> None:
        """Cancel it (a slot, for the application quitting)."""
        self.cancel.set()

    def report(self, done: int, total: int) -> None:
        with self._lock:
            self._done, self._total = done, total

    def progress(self) -> tuple[int, int]:
        with self._lock:
            return self._done, self._total


class _Relay(QObject):
    """Lives on the GUI thread; signals emitted from the pool thread arrive there queued."""

    done = Signal(object)
    failed = Signal(str)


class _Job(QRunnable):
    def __init__(self, fn: Callable[[], Any], relay: _Relay) -> None:
        super().__init__()
        self._fn: Callable[[], Any] | None = fn
        self._relay: _Relay | None = relay

    def run(self) -> None:
        fn, relay = self._fn, self._relay
        self._fn = self._relay = None  # the GUI thread keeps the last references (see below)
        assert fn is not None and relay is not None
        try:
            result = fn()
        except REFUSALS as exc:  # the person is told; no traceback: nothing to debug
            log.info("refused: %s", exc)
            relay.failed.emit(str(exc) or type(exc).__name__)
        except Exception as exc:  # a bug: reported, never swallowed
            log.exception("background task failed")
            relay.failed.emit(str(exc) or type(exc).__name__)
        else:
            relay.done.emit(result)


_pending: set[_Relay] = set()  # relays are kept alive until their answer has been delivered


def run_in_background(
    fn: Callable[[], Any],
    on_done: Callable[[Any], None],
    on_error: Callable[[str], None],
    pool: QThreadPool | None = None,
) -> None:
    """Call ``fn()`` on a pool thread; then ``on_done(result)`` or ``on_error(message)`` on the
    GUI thread. Must be called from the GUI thread.

    ``fn`` must not capture widgets (pass the plain values it needs): whatever it holds may be
    released on the pool thread, and a Qt object freed there crashes the app. The handlers may
    capture anything; they are released on the GUI thread."""
    # Parented to the application: Qt owns it, so the pool thread dropping its Python reference
    # never deletes it there; deleteLater() below deletes it on the GUI thread.
    relay = _Relay(QCoreApplication.instance())
    _pending.add(relay)

    def finish(handler: Callable[[Any], None], value: Any) -> None:
        _pending.discard(relay)
        relay.deleteLater()
        handler(value)

    relay.done.connect(lambda value: finish(on_done, value))
    relay.failed.connect(lambda message: finish(on_error, message))
    (pool or QThreadPool.globalInstance()).start(_Job(fn, relay))


def _exists(ref: weakref.ref[QObject]) -> bool:
    """The object ``ref`` names is still there, its C++ side included (a closed widget)."""
    obj = ref()
    return obj is not None and isValid(obj)


def run_for(
    owner: QObject,
    work: Callable[[], Any],
    handler: Callable[..., None],
    *args: Any,
    on_error: Callable[[str], None],
    settle: Callable[[], None] | None = None,
) -> None:
    """:func:`run_in_background` for an answer that belongs to ``owner``, a widget the person
    may close meanwhile: ``settle()``, then ``handler(*args, result)`` or ``on_error(message)``,
    run on the GUI thread only while ``owner`` exists.

    Neither ``work`` nor the callbacks hold ``owner``: ``work`` is dropped on the pool thread,
    and a widget whose last reference goes there would be destroyed off the GUI thread; the
    handlers (methods of ``owner``) are kept as weak methods, so closing it while the work runs
    frees it at once."""
    method, error_method, alive = WeakMethod(handler), WeakMethod(on_error), weakref.ref(owner)

    def live() -> bool:
        if not _exists(alive):
            return False
        if settle is not None:
            settle()
        return True

    def ok(result: Any) -> None:
        if live() and (bound := method()) is not None:
            bound(*args, result)

    def failed(message: str) -> None:
        if live() and (bound := error_method()) is not None:
            bound(message)

    run_in_background(work, ok, failed)


class PoolScheduler:
    """The workbench model's scheduler (app/services/workbench/ports.py) on Qt's pools: the
    "plan" lane is a pool of one thread (answers come in the order asked), "io" the global
    pool. Answers arrive on the GUI thread, and only while ``owner`` exists."""

    def __init__(self, owner: QObject) -> None:
        self._owner = weakref.ref(owner)
        self.plan_pool = QThreadPool(owner)
        self.plan_pool.setMaxThreadCount(1)

    def submit(self, work: Callable[[], Any], done: Callable[[Any], None],
               failed: Callable[[str], None], lane: str = "io") -> None:  # fmt: skip
        def live(handler: Callable[[Any], None]) -> Callable[[Any], None]:
            def call(value: Any) -> None:
                if _exists(self._owner):
                    handler(value)

            return call

        pool = self.plan_pool if lane == "plan" else None
        run_in_background(work, live(done), live(failed), pool)
