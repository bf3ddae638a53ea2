"""The engine's one serial owner on the Qt side: an :class:`EngineDriver` on its own QThread.

The window never calls the engine directly (a model load, a tokenization of a long document or a
job would freeze it); it emits requests, the driver runs them one at a time off the GUI thread
through the same :class:`~app.services.job_engine.JobEngine` the command line uses, and
answers with signals that Qt delivers back on the GUI thread. Job events are sent in batches (at
most every 50 ms, and at once at the end of each model call) so a fast stream never floods the
event loop. If llama.cpp dies, the driver says so and the session starts a fresh engine process
with the same model: the window and its work survive.

A pool of servers connects here too (:meth:`EngineDriver.connect_pool`); its members change on
the pool's probe threads, and the driver sends a copy of them (:class:`PoolServer`) as a
signal, which Qt queues to the window.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from app.core.cancelled import Cancelled
from app.core.engine.remote import ServerInfo
from app.core.engine.types import EngineCrashedError, EngineError, LoadSettings
from app.core.jobs.events import JobFinished, KVStats, PartialResult
from app.core.tokens import TokenCounter
from app.services.errors import BadRequest
from app.services.job_engine import JobEngine, ServerSpec
from app.services.jobs import JobOutcome, JobRun, JobSpec, ResumeSpec
from app.services.server_pool import UP, PoolMember, ServerPool
from app.services.workbench.ports import JobRequest, TuneSpec

log = logging.getLogger(__name__)

BATCH_SECONDS = 0.05


@dataclass(frozen=True)
class PoolServer:
    """A server of the pool as the window shows it: a copy, since the pool's own member
    changes on its probe threads."""

    url: str
    up: bool
    reason: str = ""  # why it was lost
    slots: int = 1  # requests it serves at once
    in_use: bool = False  # the next job runs here (the last one did, unless it was lost since)


def pool_servers(pool: ServerPool | None, in_use: ServerInfo | None) -> list[PoolServer]:
    """A copy of each member of ``pool`` ([]: none); ``in_use``: the server jobs run on."""
    if pool is None:
        return []
    url = in_use.url if in_use is not None else None
    return [PoolServer(m.url, m.state == UP, m.reason, m.slots, m.url == url)
            for m in pool.members]  # fmt: skip


class EngineDriver(QObject):
    """Runs the window's engine requests on the engine thread and answers with signals."""

    model_loaded = Signal(object, object, object)  # ModelInfo, LoadedModel, EngineCapabilities
    server_connected = Signal(object, object)  # ServerInfo, LoadedModel (its context, warnings)
    server_failed = Signal(str)  # a connection that could not be made; one sentence
    # the pool's servers (list of PoolServer; []: none), at connect and each time one changes
    pool_changed = Signal(list)
    unloaded = Signal()
    tokens_counted = Signal(int, int)  # tokens, characters
    job_events = Signal(list)  # core job events, in order, batched
    job_done = Signal(object)  # JobOutcome (also after a cancel or an engine error)
    crashed = Signal(str)  # the engine died; a new one is being started
    restarted = Signal()
    failed = Signal(str)
    status = Signal(str)
    calibration_progress = Signal(int, int)  # settings tried, settings to try
    calibrated = Signal(object, bool)  # Calibration, measured now (False: from the cache)
    calibration_stopped = Signal(str)  # cancelled or failed: the chosen settings are loaded

    def __init__(self) -> None:
        super().__init__()
        self.session = JobEngine()
        self._calibration_cancelled = False

    # ----- called from the GUI thread directly (the driver may be busy) -----

    def cancel(self) -> None:
        """Stop the running job (or calibration) at once."""
        self._calibration_cancelled = True
        self.session.cancel()

    @property
    def engine_pid(self) -> int | None:
        return self.session.engine_pid

    @property
    def server(self) -> ServerInfo | None:
        """The server jobs run on, or None: the local engine."""
        return self.session.server

    @property
    def counter(self) -> TokenCounter | None:
        """The loaded model's exact token counter (pure Python where verified: any thread)."""
        return self.session.counter

    # ----- requests, run one at a time on the engine thread -----

    @Slot(str, object)
    def load_model(self, path: str, settings: LoadSettings, model_sha256: str = "") -> None:
        self.status.emit(self.tr("Loading model…"))
        try:
            loaded = self.session.load(Path(path), settings, model_sha256=model_sha256)
        except EngineCrashedError as exc:  # the session now holds a fresh engine, no model
            self.failed.emit(str(exc))
            self.unloaded.emit()
            return
        except (EngineError, ValueError, OSError) as exc:
            self.failed.emit(str(exc))
            return
        if self.session.counter_note:  # exact but slow: a long wait is explained
            why = self.tr("Token counts come from llama.cpp's own tokenizer (exact, slower): {0}")
            note = why.format(self.session.counter_note)
            loaded = replace(loaded, warnings=(*loaded.warnings, note))
        self.model_loaded.emit(self.session.model_info, loaded, self.session.capabilities)

    @Slot(str, object, object)
    def load_tuned(self, path: str, settings: LoadSettings, tune: TuneSpec) -> None:
        """Load with the calibrated speed knobs; calibrate first when this model has none on this
        machine. A cancel or a failed calibration loads ``settings`` as chosen."""
        self._calibration_cancelled = False
        try:

            def progress(done: int, total: int) -> None:
                if done == 0:
                    self.status.emit(self.tr("Calibrating…"))
                self.calibration_progress.emit(done, total)

            found, measured = self.session.calibrated(
                Path(path), settings, tune.model_sha256, fresh=tune.fresh, trials=tune.trials,
                progress=progress, cancelled=lambda: self._calibration_cancelled,
            )  # fmt: skip
            self.calibrated.emit(found, measured)
            settings = found.settings_for(settings)
        except Cancelled:
            self.calibration_stopped.emit(self.tr("Calibration cancelled"))
        except (EngineError, ValueError, OSError) as exc:
            self.calibration_stopped.emit(self.tr("Calibration failed: {0}").format(exc))
        self.load_model(path, settings, tune.model_sha256)

    @Slot()
    def unload(self) -> None:
        self.session.unload()
        self.unloaded.emit()

    @Slot(object)
    def connect_server(self, spec: ServerSpec) -> None:
        """Run jobs on the server ``spec`` names instead of the local engine (whose model is
        let go: one engine at a time)."""
        self.status.emit(self.tr("Connecting to {0}…").format(spec.url))
        try:
            loaded = self.session.connect(spec)
        except (EngineError, ValueError, OSError) as exc:
            self.server_failed.emit(str(exc))
            return
        assert self.session.server is not None
        self.pool_changed.emit([])
        self.server_connected.emit(self.session.server, loaded)

    @Slot(object, bool)
    def connect_pool(self, specs: Sequence[ServerSpec], smallest_context: bool) -> None:
        """Run jobs on a pool of the servers ``specs`` name (each job on the first that
        answers); servers that disagree on the model, or on the context size unless
        ``smallest_context``, are refused in one sentence."""
        self.status.emit(self.tr("Connecting to {0} servers…").format(len(specs)))
        try:
            loaded = self.session.connect_pool(specs, smallest_context=smallest_context,
                                               on_change=self._member_changed)  # fmt: skip
        except BadRequest as exc:
            self.server_failed.emit(_capitalized(str(exc)))
            return
        except (EngineError, ValueError, OSError) as exc:
            self.server_failed.emit(str(exc))
            return
        info = self.session.server
        assert info is not None
        self.pool_changed.emit(pool_servers(self.session.pool, info))
        # what the pool said at connect (a server that does not answer, each one's warnings)
        self.server_connected.emit(replace(info, warnings=loaded.warnings), loaded)

    def _member_changed(self, member: PoolMember) -> None:
        """A probe thread's news of ``member``: a copy of every member, queued to the window
        (none when the pool it belongs to is no longer the one in use)."""
        pool = self.session.pool
        if pool is not None and any(m is member for m in pool.members):
            self.pool_changed.emit(pool_servers(pool, self.session.server))

    @Slot(str)
    def count_tokens(self, text: str) -> None:
        if self.session.counter is None:
            return
        self.status.emit(self.tr("Counting tokens…"))
        try:
            n = self.session.count(text)
        except (EngineError, ValueError, BadRequest) as exc:
            self.failed.emit(str(exc))
            return
        self.tokens_counted.emit(n, len(text))

    @Slot(object)
    def run_job(self, request: JobRequest) -> None:
        self.status.emit(self.tr("Running…"))
        self._execute(lambda: self.session.run(request.text, request.spec,
                                               planner=request.planner),
                      JobOutcome(request.spec))  # fmt: skip

    @Slot(object)
    def resume_state(self, spec: ResumeSpec) -> None:
        """Roll back with a saved KV state: restore it and generate without re-evaluating."""
        self._execute(lambda: self.session.resume(spec),
                      JobOutcome(JobSpec(spec.task, (spec.strategy,), max_tokens=spec.max_tokens,
                                         sampling=spec.sampling)))  # fmt: skip

    @Slot()
    def shutdown(self) -> None:
        self.session.close()

    # ----- plumbing -----

    def _execute(self, start: Callable[[], JobRun], outcome: JobOutcome) -> None:
        """Run a job's events through, restart the engine if it died, and say it is done.
        ``outcome`` stands for the job when it cannot start (BadRequest: said in one sentence)."""
        try:
            run = start()
            outcome = run.outcome
            self._pump(run)
        except BadRequest as exc:
            self.failed.emit(_capitalized(str(exc)))
        except EngineCrashedError as exc:
            self._recover(str(exc))
        except (EngineError, ValueError) as exc:
            self.failed.emit(str(exc))
        except Exception as exc:  # a fault of the app's own, or a server's reply of a shape
            # nothing expected: said and logged, and the job still ends (job_done below)
            log.exception("a job ended on an unexpected error")
            self.failed.emit(f"The job stopped on an unexpected error ({type(exc).__name__}: "
                             f"{exc}); the log has the details.")  # fmt: skip
        else:
            died = self.session.died(outcome)
            if died:
                self._recover(died)
        self.job_done.emit(outcome)

    def _pump(self, run: JobRun) -> None:
        """Forward events in batches (each model call's end at once)."""
        batch: list[Any] = []
        last = time.monotonic()
        for ev in run:
            batch.append(ev)
            now = time.monotonic()
            if isinstance(ev, JobFinished | KVStats | PartialResult) or now - last >= BATCH_SECONDS:
                self.job_events.emit(batch)
                batch, last = [], now
        if batch:
            self.job_events.emit(batch)

    def _recover(self, message: str) -> None:
        """The engine process died: say so, start a new one, load the same model again."""
        self.crashed.emit(message)
        try:
            loaded = self.session.restart()
        except (EngineError, ValueError, OSError) as exc:
            self.failed.emit(str(exc))
            self.unloaded.emit()
        else:
            if loaded is not None:
                self.model_loaded.emit(self.session.model_info, loaded,
                                       self.session.capabilities)  # fmt: skip
        self.restarted.emit()


def _capitalized(sentence: str) -> str:
    return sentence[:1].upper() + sentence[1:]


class EngineThread(QObject):
    """Starts the driver on a QThread and stops both cleanly."""

    request_load = Signal(str, object)
    request_load_tuned = Signal(str, object, object)
    request_unload = Signal()
    request_count = Signal(str)
    request_job = Signal(object)  # JobRequest
    request_resume = Signal(object)  # ResumeSpec
    request_connect = Signal(object)  # ServerSpec
    request_connect_pool = Signal(object, bool)  # tuple of ServerSpec, the smallest context
    _request_shutdown = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.qthread = QThread()  # not "thread": that would hide QObject.thread()
        self.qthread.setObjectName("contextlens-engine")
        self.driver = EngineDriver()
        self.driver.moveToThread(self.qthread)
        self.request_load.connect(self.driver.load_model)
        self.request_load_tuned.connect(self.driver.load_tuned)
        self.request_unload.connect(self.driver.unload)
        self.request_count.connect(self.driver.count_tokens)
        self.request_job.connect(self.driver.run_job)
        self.request_resume.connect(self.driver.resume_state)
        self.request_connect.connect(self.driver.connect_server)
        self.request_connect_pool.connect(self.driver.connect_pool)
        self._request_shutdown.connect(self.driver.shutdown)
        self.qthread.start()

    def cancel(self) -> None:
        self.driver.cancel()

    # ----- the workbench's engine port (app/services/workbench/ports.py): queued requests -----

    def load(self, path: str, settings: LoadSettings) -> None:
        self.request_load.emit(path, settings)

    def load_tuned(self, path: str, settings: LoadSettings, tune: TuneSpec) -> None:
        self.request_load_tuned.emit(path, settings, tune)

    def connect_server(self, spec: ServerSpec) -> None:
        self.request_connect.emit(spec)

    def connect_pool(self, specs: Sequence[ServerSpec], smallest_context: bool) -> None:
        self.request_connect_pool.emit(tuple(specs), smallest_context)

    def unload(self) -> None:
        self.request_unload.emit()

    def count(self, text: str) -> None:
        self.request_count.emit(text)

    def run_job(self, request: JobRequest) -> None:
        self.request_job.emit(request)

    def resume(self, spec: ResumeSpec) -> None:
        self.request_resume.emit(spec)

    @property
    def counter(self) -> TokenCounter | None:
        """The loaded model's exact token counter (any thread)."""
        return self.driver.counter

    def model_sha256(self, path: Path) -> str:
        """The model file's sha256, kept in the engine session's memory (off the GUI thread)."""
        return self.driver.session.model_sha256(path)

    def stop(self) -> None:
        if self.qthread.isRunning():
            self.driver.cancel()
            self._request_shutdown.emit()
            self.qthread.quit()
            self.qthread.wait(10_000)
