"""The engine's one serial owner on the Qt side: a QObject living on its own QThread.

The window never calls the engine directly (a model load, a tokenization of a long document or a
job would freeze it); it emits requests, this worker runs them one at a time off the GUI thread,
and answers with signals that Qt delivers back on the GUI thread. Job events are sent in batches
(at most every 50 ms, and at once at the end of each model call) so a fast stream never floods
the event loop. If llama.cpp dies, the worker says so, starts a fresh engine process and loads
the same model again: the window and its session survive.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from app.core.calibrate import (
    CalibrationCancelled,
    cached,
    calibrate,
    candidates,
    machine_key,
)
from app.core.engine.host import EngineHost
from app.core.engine.remote import NO_AUDIT, NO_KV_STATE, RemoteEngine, ServerInfo
from app.core.engine.remote_http import Connection
from app.core.engine.types import (
    EngineCrashedError,
    EngineError,
    KVState,
    LoadedModel,
    LoadSettings,
    SamplingSettings,
)
from app.core.jobs.audit import Audit
from app.core.jobs.tasks import (
    CancelToken,
    JobFinished,
    JobResult,
    KVStats,
    PartialResult,
    resume,
    run_strategies,
    state_after,
)
from app.core.planning.strategies import Planner
from app.core.tokens import LlamaCounter, TokenCounter, host_counter

BATCH_SECONDS = 0.05


@dataclass(frozen=True)
class JobSpec:
    """What the person asked for: one task under one or more strategies."""

    task: str  # summarize, ask, extract
    strategies: tuple[str, ...]
    text: str
    questions: tuple[str, ...] = ()
    instruction: str = ""
    max_tokens: int = 256
    keep_kv: bool = True  # save the KV state after each strategy, for an instant rollback
    audit: bool = False  # check against llama.cpp that the model saw exactly the plan shown
    lanes: int | None = None  # a map phase's replies generated this many at a time
    sampling: SamplingSettings = field(default_factory=SamplingSettings)  # the Sampling box's
    # The document's planner, holding the plans the window made for these strategies: the job
    # runs what the window showed, without planning again (None: the job plans the bare text).
    planner: Planner | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ResumeSpec:
    """A rollback that resumes: the saved state, how much of it is the prompt, what it was."""

    state: KVState
    prompt_tokens: int
    task: str
    strategy: str
    max_tokens: int = 256
    sources: tuple[tuple[int, int], ...] = ()
    sampling: SamplingSettings = field(default_factory=SamplingSettings)  # the version's


@dataclass(frozen=True)
class TuneSpec:
    """Load with the speed settings calibrated for this model and machine, measuring them first
    when there are none yet (or when ``fresh``)."""

    model_sha256: str
    fresh: bool = False
    trials: tuple[LoadSettings, ...] | None = None  # the candidates; None: calibrate's own


@dataclass(frozen=True)
class ServerSpec:
    """A server to run jobs on (the key goes to the engine thread only, never to settings)."""

    url: str
    api_key: str | None = field(default=None, repr=False)
    n_ctx: int | None = None  # None: the server's own
    model: str | None = None  # the server's model id; None: the first it lists
    model_path: str | None = None  # the same model's GGUF here, for exact counts and template


@dataclass
class JobOutcome:
    """A finished job: a result per strategy, and the KV state after each (when kept)."""

    spec: JobSpec
    results: list[JobResult] = field(default_factory=list)
    states: dict[int, KVState] = field(default_factory=dict)
    audit: Audit | None = None  # when the spec asked for one: its findings and counts


class EngineWorker(QObject):
    model_loaded = Signal(object, object, object)  # ModelInfo, LoadedModel, EngineCapabilities
    server_connected = Signal(object, object)  # ServerInfo, LoadedModel (its context, warnings)
    server_failed = Signal(str)  # a connection that could not be made; one sentence
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
        self._host = EngineHost()
        self._cancel = CancelToken()
        self._model: tuple[str, LoadSettings] | None = None
        self._counter: TokenCounter | None = None
        self._lost_state = ""  # why the last KV state could not be kept (the engine died)
        self._remote: RemoteEngine | None = None  # connected to a server instead of llama.cpp

    # ----- called from the GUI thread directly (the worker may be busy) -----

    def cancel(self) -> None:
        """Stop the running job at once: the job stops at its next step, llama.cpp now."""
        self._cancel.set()
        remote = self._remote
        if remote is not None:
            remote.cancel()
        else:
            self._host.cancel()

    @property
    def engine_pid(self) -> int | None:
        return None if self._remote is not None else self._host.pid

    @property
    def server(self) -> ServerInfo | None:
        """The server jobs run on, or None: the local engine."""
        remote = self._remote
        return remote.info if remote is not None else None

    @property
    def counter(self) -> TokenCounter | None:
        """The loaded model's exact token counter (pure Python where verified: any thread)."""
        return self._counter

    # ----- requests, run one at a time on the worker thread -----

    @Slot(str, object)
    def load_model(self, path: str, settings: LoadSettings) -> None:
        self.status.emit(self.tr("Loading model…"))
        self._disconnect()  # one engine at a time: a model here ends a server's connection
        try:
            loaded = self._host.load(path, settings)
            caps = self._host.capabilities
            self._counter = host_counter(Path(path), self._host)
        except EngineCrashedError as exc:
            # The child died loading this file; the model it held before went with it. Loading
            # the file again would likely crash again: a fresh engine waits, with no model.
            self.failed.emit(str(exc))
            self.unload()
            return
        except (EngineError, ValueError, OSError) as exc:
            self.failed.emit(str(exc))
            return
        self._model = (path, settings)
        if isinstance(self._counter, LlamaCounter):  # exact but slow: a long wait is explained
            why = self.tr("Token counts come from llama.cpp's own tokenizer (exact, slower): {0}")
            loaded = replace(loaded, warnings=(*loaded.warnings, why.format(self._counter.note)))
        self.model_loaded.emit(self._host.model_info, loaded, caps)

    @Slot(str, object, object)
    def load_tuned(self, path: str, settings: LoadSettings, tune: TuneSpec) -> None:
        """Load with the calibrated speed knobs; calibrate first when this model has none on this
        machine. A cancel or a failed calibration loads ``settings`` as chosen."""
        self._cancel = token = CancelToken()
        try:
            found = None
            if not tune.fresh:
                machine = machine_key(self._host.start())
                found = cached(tune.model_sha256, machine, settings.kv_cache_type)
            if found is None:
                todo = list(tune.trials) if tune.trials is not None else candidates(settings)
                self.status.emit(self.tr("Calibrating…"))
                self.calibration_progress.emit(0, len(todo))
                found = calibrate(self._host, Path(path), tune.model_sha256, settings,
                                  trials=todo, progress=self.calibration_progress.emit,
                                  cancelled=token.is_set, use_cache=False)  # fmt: skip
                self.calibrated.emit(found, True)
            else:
                self.calibrated.emit(found, False)
            settings = found.settings_for(settings)
        except CalibrationCancelled:
            self.calibration_stopped.emit(self.tr("Calibration cancelled"))
        except (EngineError, ValueError, OSError) as exc:
            self.calibration_stopped.emit(self.tr("Calibration failed: {0}").format(exc))
        self.load_model(path, settings)

    @Slot()
    def unload(self) -> None:
        self._host.close()
        self._host = EngineHost()
        self._disconnect()
        self._model = None
        self._counter = None
        self.unloaded.emit()

    @Slot(object)
    def connect_server(self, spec: ServerSpec) -> None:
        """Run jobs on the server ``spec`` names instead of the local engine (whose model is
        let go: one engine at a time)."""
        self.status.emit(self.tr("Connecting to {0}…").format(spec.url))
        t0 = time.perf_counter()
        try:
            connection = Connection(spec.url, api_key=spec.api_key)
            remote = RemoteEngine(connection, model=spec.model, n_ctx=spec.n_ctx,
                                  model_path=spec.model_path)  # fmt: skip
            try:
                info = remote.connect()
                counter = remote.counter()
            except BaseException:
                remote.close()
                raise
        except (EngineError, ValueError, OSError) as exc:
            self.server_failed.emit(str(exc))
            return
        self._host.close()
        self._host = EngineHost()
        self._disconnect()
        self._remote, self._counter, self._model = remote, counter, None
        loaded = LoadedModel(f"{info.url} {info.model}", info.n_ctx, info.n_ctx_train or 0, 0,
                             0, 0, 0, False, "", False, time.perf_counter() - t0,
                             info.warnings)  # fmt: skip
        self.server_connected.emit(info, loaded)

    def _disconnect(self) -> None:
        remote, self._remote = self._remote, None
        if remote is not None:
            remote.close()

    @Slot(str)
    def count_tokens(self, text: str) -> None:
        if self._counter is None:
            return
        self.status.emit(self.tr("Counting tokens…"))
        try:
            n = self._counter.count(text)
        except (EngineError, ValueError) as exc:
            self.failed.emit(str(exc))
            return
        self.tokens_counted.emit(n, len(text))

    @Slot(object)
    def run_job(self, spec: JobSpec) -> None:
        remote = self._remote
        if remote is not None:  # a server keeps no KV state for us, and cannot be audited
            spec = replace(spec, keep_kv=False)
        outcome = JobOutcome(spec)
        if self._counter is None or (remote is None and self._host.model is None):
            self.failed.emit(self.tr("Load a model or connect to a server first."))
            self.job_done.emit(outcome)
            return
        if remote is not None and spec.audit:
            self.failed.emit(self.tr("The audit needs the local engine: {0}").format(NO_AUDIT))
            self.job_done.emit(outcome)
            return
        engine: Any = remote if remote is not None else self._host
        n_ctx = remote.info.n_ctx if remote is not None else self._host.model.n_ctx
        self._cancel = CancelToken()
        options: dict[str, Any] = {
            "n_ctx": n_ctx,
            "max_tokens": spec.max_tokens,
            "cancel": self._cancel,
            "lanes": spec.lanes,
            "sampling": spec.sampling,
        }
        if spec.task == "ask":
            options["questions"] = list(spec.questions)
        if spec.task == "extract":
            options["instruction"] = spec.instruction
        if spec.audit:  # the counter is the model's own tokenizer: the counts must match too
            outcome.audit = options["audit"] = Audit(self._host, exact_counts=True)
        self.status.emit(self.tr("Running…"))
        counter = self._counter
        planner = spec.planner if spec.planner and spec.planner.counter is counter else None
        self._execute(lambda: run_strategies(engine, spec.text, counter, task=spec.task,
                                      strategies=list(spec.strategies), planner=planner,
                                      **options),
                      outcome)  # fmt: skip

    @Slot(object)
    def resume_state(self, spec: ResumeSpec) -> None:
        """Roll back with a saved KV state: restore it and generate without re-evaluating."""
        outcome = JobOutcome(JobSpec(spec.task, (spec.strategy,), "", max_tokens=spec.max_tokens,
                                     keep_kv=False, sampling=spec.sampling))  # fmt: skip
        if self._remote is not None:
            self.failed.emit(self.tr("A rollback cannot resume instantly on a server: "
                                     "{0}").format(NO_KV_STATE))  # fmt: skip
            self.job_done.emit(outcome)
            return
        self._cancel = CancelToken()
        self._execute(lambda: resume(self._host, spec.state, spec.prompt_tokens, task=spec.task,
                                     strategy=spec.strategy, max_tokens=spec.max_tokens,
                                     sources=spec.sources, cancel=self._cancel,
                                     sampling=spec.sampling),
                      outcome)  # fmt: skip

    @Slot()
    def shutdown(self) -> None:
        self._host.close()
        self._disconnect()

    # ----- plumbing -----

    def _execute(self, events: Callable[[], Iterator[Any]], outcome: JobOutcome) -> None:
        """Run a job's events through, restart the engine if it died, and say it is done."""
        try:
            self._pump(events(), outcome)
        except EngineCrashedError as exc:
            self._recover(str(exc))
        except (EngineError, ValueError) as exc:
            self.failed.emit(str(exc))
        else:
            self._recover_if_dead(outcome)
        self.job_done.emit(outcome)

    def _pump(self, events: Any, outcome: JobOutcome) -> None:
        """Forward events in batches; keep each strategy's result and KV state."""
        batch: list[object] = []
        last = time.monotonic()
        for ev in events:
            batch.append(ev)
            if isinstance(ev, JobFinished):
                outcome.results.append(ev.result)
                if outcome.spec.keep_kv:
                    state = self._state_after(ev.result)
                    if state is not None:
                        outcome.states[len(outcome.results) - 1] = state
            now = time.monotonic()
            if isinstance(ev, JobFinished | KVStats | PartialResult) or now - last >= BATCH_SECONDS:
                self.job_events.emit(batch)
                batch, last = [], now
        if batch:
            self.job_events.emit(batch)

    def _state_after(self, result: JobResult) -> KVState | None:
        try:
            return state_after(self._host, result)
        except EngineError as exc:  # no state to keep; the job's own outcome is unaffected
            self._lost_state = str(exc)  # a crash while saving: what to tell the person
            return None

    def _recover_if_dead(self, outcome: JobOutcome) -> None:
        """A job reports an engine failure as its result's error and ends; if the engine process
        is gone, restart it now rather than fail the next request."""
        lost, self._lost_state = self._lost_state, ""
        if self._model is not None and not self._host.alive:
            errors = [r.error for r in outcome.results if r.error] or ([lost] if lost else [])
            self._recover(errors[-1] if errors else self.tr("the engine process ended"))

    def _recover(self, message: str) -> None:
        """The engine process died: say so, start a new one, load the same model again."""
        self.crashed.emit(message)
        self._host.close()
        self._host = EngineHost()
        if self._model is not None:
            path, settings = self._model
            self.load_model(path, settings)
        self.restarted.emit()


class EngineThread(QObject):
    """Starts the worker on a QThread and stops both cleanly."""

    request_load = Signal(str, object)
    request_load_tuned = Signal(str, object, object)
    request_unload = Signal()
    request_count = Signal(str)
    request_job = Signal(object)
    request_resume = Signal(object)
    request_connect = Signal(object)  # ServerSpec
    _request_shutdown = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.thread = QThread()
        self.thread.setObjectName("contextlens-engine")
        self.worker = EngineWorker()
        self.worker.moveToThread(self.thread)
        self.request_load.connect(self.worker.load_model)
        self.request_load_tuned.connect(self.worker.load_tuned)
        self.request_unload.connect(self.worker.unload)
        self.request_count.connect(self.worker.count_tokens)
        self.request_job.connect(self.worker.run_job)
        self.request_resume.connect(self.worker.resume_state)
        self.request_connect.connect(self.worker.connect_server)
        self._request_shutdown.connect(self.worker.shutdown)
        self.thread.start()

    def cancel(self) -> None:
        self.worker.cancel()

    def stop(self) -> None:
        if self.thread.isRunning():
            self.worker.cancel()
            self._request_shutdown.emit()
            self.thread.quit()
            self.thread.wait(10_000)
