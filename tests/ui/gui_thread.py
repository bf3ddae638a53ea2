"""Waiting on a signal that the engine thread emits, from a test on the GUI thread.

PySide6 calls a plain Python callable (pytest-qt's waitSignal handler is one) on the thread that
emits the signal. On the engine thread that handler races the GUI thread's wait: when the signal
comes before the wait's event loop has started, the loop is told to quit before it runs and its
timeout timer is stopped from the wrong thread (which breaks it), so the wait never ends. A
QObject's method is queued to the QObject's own thread instead; :func:`on_gui_thread` relays the
signal through one that lives on the GUI thread.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal, SignalInstance


class _Relay(QObject):
    fired = Signal(tuple)  # the relayed signal's arguments

    def __init__(self, signal: SignalInstance, owner: QObject) -> None:
        super().__init__(owner)
        signal.connect(self._relay)

    def _relay(self, *args: object) -> None:
        self.fired.emit(args)


def on_gui_thread(signal: SignalInstance, owner: QObject) -> SignalInstance:
    """``signal``, emitted again on the GUI thread with its arguments as one tuple; the relay
    lives as long as ``owner`` (a QObject of the GUI thread, such as the window)."""
    return _Relay(signal, owner).fired
