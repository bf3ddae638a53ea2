"""The first calibration of a model, in the background after its first load.

The window loads a model it has no calibration for at once, with safe settings, and starts this:
a thread that measures the candidates on an engine child of its own
(app/services/calibration.py). It yields to the person's work: between trials it waits while
anything else runs (a load, a plan, a job), and a trial something ran alongside is measured
again. When it ends the result is cached and offered; nothing is reloaded without the person.
"""

from __future__ import annotations

import logging
import threading

from PySide6.QtCore import QObject, Signal

from app.core.calibrate import candidates
from app.core.cancelled import Cancelled
from app.core.engine.api import Engine
from app.core.engine.types import EngineError
from app.services.calibration import calibrate_apart
from app.services.workbench.ports import CalibrationJob

log = logging.getLogger(__name__)
JOIN_S = 10.0  # how long closing waits for the trial under way to stop


class BackgroundCalibration(QObject):
    """One calibration at a time on a thread of its own; progress and the end as signals."""

    progress = Signal(int, int)  # settings tried, settings to try
    finished = Signal(object, object)  # CalibrationJob, Calibration (cached already)
    stopped = Signal(object, str)  # CalibrationJob, why it stopped (cancelled, failed)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()
        self._free = threading.Event()  # set: nothing else runs, trials may go on
        self._free.set()
        self._lock = threading.Lock()
        self._disturbances = 0  # times other work began (a trial it overlaps is measured again)
        self._host: Engine | None = None
        self.job: CalibrationJob | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def paused(self) -> bool:
        """Waiting for other work to end before the next trial."""
        return not self._free.is_set()

    def start(self, job: CalibrationJob) -> None:
        """Calibrate ``job``; one running already is dropped (it ends on its own thread)."""
        self.cancel(quiet=True)
        self._cancel = threading.Event()
        self.job = job
        thread = threading.Thread(target=self._run, args=(job, self._cancel),
                                  name="contextlens-calibration", daemon=True)  # fmt: skip
        self._thread = thread
        thread.start()

    def set_busy(self, busy: bool) -> None:
        """Other work runs (True) or has ended (False): the trials wait for it to end."""
        if busy and self._free.is_set():
            with self._lock:
                self._disturbances += 1
            self._free.clear()  # the trial under way ends (and is measured again); the next waits
        elif not busy:
            self._free.set()

    def cancel(self, *, quiet: bool = False) -> None:
        """Stop: the trial under way is interrupted; ``stopped`` says so, unless ``quiet`` (the
        job is then forgotten: its model is being replaced)."""
        if quiet:
            self.job = None
        self._cancel.set()
        self._free.set()  # a paused calibration wakes to see it
        host = self._host
        if host is not None:
            host.cancel()

    def close(self) -> None:
        """Cancel and wait for the engine child to be gone (the window is closing)."""
        self.cancel()
        self._join()

    def _join(self) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_S)

    # ----- on the calibration thread -----

    def _run(self, job: CalibrationJob, cancel: threading.Event) -> None:
        seen = [0]
        total = len(job.trials) if job.trials is not None else len(candidates(job.base))
        self.progress.emit(0, total)

        def wait_turn() -> bool:
            """Asked before each trial: wait while other work runs; True: stop."""
            while not cancel.is_set() and not self._free.wait(0.5):
                pass
            with self._lock:
                seen[0] = self._disturbances
            return cancel.is_set()

        def disturbed() -> bool:
            with self._lock:
                return self._disturbances != seen[0] or not self._free.is_set()

        mine: list[Engine] = []

        def started(host: Engine) -> None:
            mine.append(host)
            if not cancel.is_set():
                self._host = host

        try:
            found = calibrate_apart(job.model, job.model_sha256, job.base, trials=job.trials,
                                    progress=self.progress.emit, cancelled=wait_turn,
                                    disturbed=disturbed, started=started)  # fmt: skip
        except Cancelled:
            self.stopped.emit(job, self.tr("Calibration cancelled"))
        except (EngineError, ValueError, OSError) as exc:
            log.warning("background calibration failed: %s", exc)
            self.stopped.emit(job, self.tr("Calibration failed: {0}").format(exc))
        else:
            self.finished.emit(job, found)
        finally:
            if mine and self._host is mine[0]:
                self._host = None
