"""Cyclic garbage collection on the GUI thread only.

Python runs a collection on whichever thread happens to allocate when a generation's count
passes its threshold. In this app that is often a pool thread (a GGUF file read, a plan, an
export), and a collection there frees whatever unreachable cycles exist at that moment: a
closed dialog, a window's lambdas, a finished relay. A Qt object destroyed on a thread that does
not own it crashes the app, or deadlocks it while that thread holds the GIL (the GUI thread
waits for the GIL inside Qt, the pool thread waits for a lock the GUI thread holds), and then
nothing, not even a watchdog thread of Python's, can run again.

So automatic collection is turned off, and a timer on the GUI thread runs the same
generational collections Python would have run, by the same thresholds, where destroying a Qt
object is safe. Reference counting still frees everything that is not in a cycle at once, on
any thread, as before.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 1000  # cycles wait at most this long; a collection of the young takes < 1 ms


class GuiThreadCollector(QObject):
    """Collect cycles from a timer on the thread this object lives on (the GUI thread)."""

    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        self._thresholds = gc.get_threshold()
        gc.disable()
        self._timer = QTimer(self)
        self._timer.timeout.connect(self.check)
        self._timer.start(INTERVAL_MS)

    def check(self) -> None:
        """The collections Python would have run by now: the young generation when it passed
        its threshold, and each older one in turn when it did too."""
        counts = gc.get_count()
        for generation in range(len(counts)):
            if counts[generation] <= self._thresholds[generation]:
                break
            gc.collect(generation)


def collect_on_gui_thread(app: QObject) -> GuiThreadCollector:
    """Install the collector once for ``app`` (the QApplication); later calls return it."""
    existing = app.findChild(GuiThreadCollector)
    return existing if existing is not None else GuiThreadCollector(app)
