"""What the person waits for in the window: a file opening, a plan, a load, a calibration, a run.

One part of the workbench (model.py) that the others share: the engine state (engine_state.py)
and the model say when a wait begins and ends; the window shows a busy bar while any runs and
Cancel (and Esc) while one that can be cancelled does, and the status line a wait began with
is taken down when it ends ("Planning middle…" must not outlast the plan).
"""

from __future__ import annotations

from app.services.workbench.ports import CalibrationPort, Message, WorkbenchEvents

# what Cancel (and Esc) stops: a model load runs to its end; the calibration before it can stop
# (the load then goes on)
CANCELLABLE = frozenset({"open", "plan", "run", "calibrate"})


class Waits:
    """The waits under way, said to ``events`` as they change; the first calibration's trials
    (``calibration``) hold back while the person waits for anything."""

    def __init__(self, events: WorkbenchEvents, calibration: CalibrationPort) -> None:
        self._events = events
        self._calibration = calibration
        self._now: set[str] = set()
        self._lines: dict[str, Message] = {}  # the status line each wait began with

    @property
    def now(self) -> frozenset[str]:
        return frozenset(self._now)

    @property
    def cancellable(self) -> bool:
        return bool(self._now & CANCELLABLE)

    def __contains__(self, what: object) -> bool:
        return what in self._now

    def set(self, what: str, waiting: bool, message: Message | None = None) -> None:
        """``what`` begins (``waiting``) or ends; ``message``: the status line to show."""
        if waiting:
            self._now.add(what)
        else:
            self._now.discard(what)
        self._events.waits_changed(frozenset(self._now))
        self._calibration.set_busy(bool(self._now))
        if message is not None:
            self._events.status(message, 0)
        if waiting and message is not None:
            self._lines[what] = message
        elif not waiting and (began := self._lines.pop(what, None)) is not None:
            self._events.status_over(began)
