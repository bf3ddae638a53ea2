"""The window's workbench without Qt: one object, :class:`WorkbenchModel` (model.py), and its parts.

The model holds what the window shows and decides what each request does; it reaches the world
only through the ports it is given (ports.py: a scheduler, the engine, the calibration, an event
sink), so a unit test drives it with plain Python and the window with Qt (app/ui/session_model.py).
Its parts take it as an interface, never its private methods: the model or server the jobs run
on (engine_state.py), the line of work in the history (line.py: through :class:`line.Desk`),
what the person waits for (waits.py). What it decides from plain values lives in
decisions.py, so the command line could ask the same.
"""

from __future__ import annotations

from app.services.workbench.decisions import JobChoices, Refusal, StartedJob
from app.services.workbench.model import WorkbenchModel

__all__ = ["JobChoices", "Refusal", "StartedJob", "WorkbenchModel"]
