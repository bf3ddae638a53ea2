"""The main window's status bar: what runs now, how far a run has got, and what went wrong.

A busy bar shows while anything runs (a load, a plan, a calibration counting its trials, a run
filling it as RunStatus says); beside the messages, a run's line says what it is doing
("Window 3 of 9 · prompt 1,200 of 3,700 tokens · about 2 min left"), so a "Cancelling…" or an
error is never written over. The line and the bar have fixed widths: a status bar lays out a
width-ignoring label in a few pixels under the bar (1366 and 1024 px wide windows showed
"r … k"), and a line that followed its text would lay the window out at every update.
Whether what runs can be cancelled is said (``cancellable``) for the toolbar's Cancel and Esc.
An error is said in the status bar and in a window-modal message box.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QMessageBox, QProgressBar, QSizePolicy, QStatusBar, QWidget

from app.ui.run_status import RunStatus
from app.ui.session_model import SessionModel
from app.ui.widgets import ElidedLabel, plain_message_box

RUN_LINE_CHARS = 88  # the run's line is this many average characters wide: a whole line
BAR_CHARS = 24  # the progress bar's width, in average characters


class WindowStatus(QObject):
    """The status bar of ``window``, following ``session``: ``progress`` (the bar),
    ``run_line`` (the run's line) and ``run_status`` (which the window gives each job event)."""

    cancellable = Signal(bool)  # whether what runs now can be cancelled (each time waits change)

    def __init__(self, window: QWidget, bar: QStatusBar, session: SessionModel) -> None:
        super().__init__(window)
        self._window, self._bar, self._session = window, bar, session
        char = window.fontMetrics().averageCharWidth()
        self.progress = QProgressBar()
        self.progress.setFixedWidth(char * BAR_CHARS)
        self.progress.setRange(0, 0)
        self.progress.hide()
        self.run_line = ElidedLabel()  # cut at its end, the whole line in its tooltip
        self.run_line.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.run_line.setFixedWidth(char * RUN_LINE_CHARS)
        self.run_line.hide()
        self.run_status = RunStatus(window)
        self.run_status.changed.connect(self.show_run_status)
        bar.addPermanentWidget(self.run_line)
        bar.addPermanentWidget(self.progress)
        session.waits_changed.connect(self.on_waits_changed)
        session.status.connect(bar.showMessage)
        session.status_over.connect(self.clear)
        session.calibration_progress.connect(self.show_steps)

    def on_waits_changed(self, waits: frozenset[str]) -> None:
        """The busy bar shows while anything runs; ``cancellable`` says whether what runs can
        be cancelled."""
        self.progress.setVisible(bool(waits))
        running = "run" in waits
        if not running:
            self.run_status.stop()
            self.run_line.hide()
        if "calibrate" in waits:
            pass  # the calibration counts its trials (show_steps)
        elif running and self.run_status.active:
            self.show_run_status(*self.run_status.shown)
        else:
            self.progress.setRange(0, 0)  # busy: a load or a plan has no steps to count
            self.progress.setFormat("%p%")
        self.cancellable.emit(self._session.cancellable)

    def show_run_status(self, line: str, value: int, maximum: int) -> None:
        self.run_line.setText(line)
        self.run_line.show()
        self.progress.setRange(0, maximum)
        self.progress.setValue(value)
        # a long job's first steps are under 1%: said so, not "0%" beside a line that moves
        self.progress.setFormat("<1%" if 0 < value * 100 < maximum else "%p%")

    def show_steps(self, done: int, total: int) -> None:
        """A wait that counts its steps (a calibration's trials): ``done`` of ``total``."""
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        self.progress.setFormat("%p%")

    def clear(self, message: str) -> None:
        """A wait is over: its "…ing" line goes, unless a newer message replaced it."""
        if self._bar.currentMessage() == message:
            self._bar.clearMessage()

    def show_error(self, message: str) -> None:
        """``message`` in the status bar and in a message box over the window (open(), not
        exec(): window-modal, it never blocks the event loop)."""
        self._bar.showMessage(message)
        box = QMessageBox(QMessageBox.Icon.Warning, self.tr("ContextLens"), message,
                          QMessageBox.StandardButton.Ok, self._window)  # fmt: skip
        plain_message_box(box)  # the message may quote a file, a server or an archive
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
