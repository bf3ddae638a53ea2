"""SIGTERM, SIGHUP and SIGINT close the window as its close button does, so a logout, a
``kill`` or Ctrl+C in the terminal ends the run, stops the engine child and removes its
folder. Python's own SIGTERM ends the process at once and left all of that behind.

Python runs a signal handler only between bytecodes, and the Qt event loop runs none while it
waits: the C-level handler writes to a socket (``signal.set_wakeup_fd``) that a QSocketNotifier
watches, and reading it gives Python the moment to run the handler.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable

from PySide6.QtCore import QObject, QSocketNotifier

SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGINT")
                if hasattr(signal, name))  # fmt: skip


class CloseOnSignals(QObject):
    """Calls ``close`` (once, from the event loop) when one of SIGNALS arrives; ``close``
    should end the event loop (the window's close does, as the last window)."""

    def __init__(self, close: Callable[[], object], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._close = close
        self.received: int | None = None
        self._closing = False
        self._read, self._write = socket.socketpair()
        for end in (self._read, self._write):
            end.setblocking(False)
        signal.set_wakeup_fd(self._write.fileno())
        for number in SIGNALS:
            signal.signal(number, self._on_signal)
        self._notifier = QSocketNotifier(self._read.fileno(), QSocketNotifier.Type.Read, self)
        self._notifier.activated.connect(self._drain)

    def _on_signal(self, number: int, _frame: object) -> None:
        # only noted: Python may run this at any bytecode, inside any slot; the close waits
        # for the notifier's slot below (a timer started here never fired)
        if self.received is None:
            self.received = number

    def _drain(self) -> None:
        try:
            while self._read.recv(64):
                pass
        except OSError:  # nothing more to read (EAGAIN)
            pass
        if self.received is not None and not self._closing:  # the handler has run by now
            self._closing = True
            self._close()
