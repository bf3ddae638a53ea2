"""One long operation at a time behind a modal progress dialog (the History panel's export and
import): shown only after a short delay, busy until the worker reports its total, then following
it, and a Cancel that asks the worker to stop."""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QProgressDialog, QWidget

from app.ui.background import Progress

PROGRESS_DELAY_MS = 400  # quick operations finish before a progress dialog would flash
PROGRESS_POLL_MS = 100  # how often the dialog reads the worker's progress
_BAR_MAX = 2**31 - 1  # a progress bar holds a C int; larger totals are scaled down


def bar_values(done: int, total: int) -> tuple[int, int]:
    """``done`` and ``total`` scaled alike to fit a progress bar (value, maximum)."""
    shift = max(0, total.bit_length() - _BAR_MAX.bit_length())
    return done >> shift, total >> shift


class OperationProgress(QObject):
    """The dialog of ``parent`` and the operation it stands for (``waiting``).

    One dialog for the parent's life, connected to bound methods only: a closure holding the
    parent, released while a child dialog is destroyed, could destroy the parent too."""

    changed = Signal()  # an operation began or ended: what may start next changed
    cancelling = Signal()  # the person pressed Cancel; the worker answers soon

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self._waiting: Progress | None = None
        self.dialog = QProgressDialog(parent)
        self.dialog.setWindowModality(Qt.WindowModality.WindowModal)
        self.dialog.setRange(0, 0)  # busy until the worker reports its total
        self.dialog.setAutoClose(False)
        self.dialog.setAutoReset(False)
        self.dialog.setMinimumDuration(PROGRESS_DELAY_MS)
        self.dialog.canceled.connect(self._cancel)
        self.dialog.reset()  # stops the timer that would show it by itself
        self.dialog.hide()
        self._poll = QTimer(self)
        self._poll.setInterval(PROGRESS_POLL_MS)
        self._poll.timeout.connect(self._show)

    @property
    def waiting(self) -> Progress | None:
        """The operation running (None: none; another may start)."""
        return self._waiting

    def start(self, text: str) -> Progress:
        """A new long operation: the dialog shows itself after a short delay."""
        wait = Progress()
        self._waiting = wait
        self.dialog.reset()
        self.dialog.setLabelText(text)
        self.dialog.setRange(0, 0)
        self.dialog.setValue(0)  # starts the delay after which the dialog shows itself
        self._poll.start()
        self.changed.emit()
        return wait

    def end(self, wait: Progress) -> None:
        """``wait``'s operation answered (a result, an error or a cancellation)."""
        if self._waiting is wait:
            self._show()  # the last report, so a finished operation shows as full
            self._poll.stop()
            self._waiting = None
            self.dialog.reset()
            self.dialog.hide()
            self.changed.emit()

    def _show(self) -> None:
        """Copy the worker's progress into the dialog (timer, GUI thread)."""
        wait = self._waiting
        if wait is None or wait.cancel.is_set():  # a cancelled dialog has hidden itself
            return
        done, total = wait.progress()
        if total <= 0:
            return
        value, maximum = bar_values(done, total)
        if self.dialog.maximum() != maximum:
            self.dialog.setMaximum(maximum)
        if value != self.dialog.value():
            self.dialog.setValue(value)  # once shown, a modal dialog processes events here

    def _cancel(self) -> None:
        """The dialog's Cancel: ask the worker to stop. It answers soon with a cancellation
        (nothing changed), or with its result when it had already finished; until then no
        other operation starts."""
        wait = self._waiting
        if wait is None or wait.cancel.is_set():
            return
        wait.cancel.set()
        self.cancelling.emit()
