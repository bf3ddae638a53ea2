"""The window's session as a model: one document, its plan, the engine's state and the job.

The window used to be model, controller and view at once, pushing every change to every panel
by hand. Here the state lives in one QObject that decides where the slow work runs and says what
changed with signals; panels subscribe to them (as napari's widgets subscribe to their model's
events) and the window only wires them. It never touches a widget: what the toolbar holds comes
in as a plain :class:`JobChoices`, so the model can be driven, and tested, without a window.

Slow work never runs on the GUI thread: the engine thread owns llama.cpp (loads, jobs), a child
process plans and counts the document whenever its counter can be rebuilt there (so its
GIL-bound Python never stalls this process; stale plan requests are skipped), a one-thread pool
waits on it in order (or plans in this process when it cannot), and store calls run in the
background.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QMetaMethod, QObject, QThreadPool, Signal
from shiboken6 import isValid

from app.core import calibrate
from app.core.documents import Document
from app.core.documents.isolated import ReadCancelled, read_document
from app.core.engine.gguf import ModelInfo
from app.core.engine.remote import ServerInfo
from app.core.engine.types import DEFAULT_N_CTX, EngineCapabilities, LoadedModel, LoadSettings
from app.core.gc_pause import gc_paused
from app.core.jobs.events import JobFinished, RingFallback
from app.core.planning.frame import FrameSource
from app.core.planning.plan import Plan
from app.core.planning.process import PlanProcess
from app.core.planning.strategies import Planner
from app.core.sampling import from_version
from app.core.tokens import CL100K_KEY, TokenCounter, cl100k, counter_key
from app.services import versions, workbench
from app.services.engine_session import ServerSpec
from app.services.history import Repository, VersionInfo
from app.services.jobs import JobOutcome, JobSpec, ResumeSpec
from app.services.workbench import JobChoices, StartedJob
from app.ui.background import run_in_background
from app.ui.background_calibration import BackgroundCalibration, CalibrationJob
from app.ui.engine_thread import EngineThread, JobRequest, TuneSpec
from app.ui.i18n import finish_label, strategy_label
from app.ui.plan_index import PlanIndex, index_plan

log = logging.getLogger(__name__)
# a model load runs to its end; the calibration before it can stop (the load then goes on)
CANCELLABLE = frozenset({"open", "plan", "run", "calibrate"})


class SessionModel(QObject):
    """The open document and its counts, the plan shown, the model or server the jobs run on,
    the job running and what the person waits for; read through its properties, changed by
    its methods, and every change said by a signal."""

    document_changed = Signal(object)  # the Document opened
    # characters, exact tokens (None: not counted yet), cl100k estimate, context (None: no model)
    counts_changed = Signal(int, object, int, object)
    plan_changed = Signal(object, object)  # the Plan now shown, its PlanIndex
    model_loaded = Signal(object, object, object)  # ModelInfo, LoadedModel, capabilities or None
    server_connected = Signal(object)  # ServerInfo: jobs run there now
    server_failed = Signal(str)  # a connection that could not be made; one sentence
    model_unloaded = Signal()  # no model and no server any more
    calibration_progress = Signal(int, int)  # settings tried, settings to try
    calibrated = Signal(object, bool)  # Calibration, measured now (False: from the cache)
    calibration_stopped = Signal(str)  # cancelled or failed: the chosen settings are loaded
    # a first calibration, in the background after the load (the model is usable meanwhile)
    background_calibration = Signal(int, int)  # settings tried, settings to try
    calibration_offered = Signal(object, object)  # model Path, its Calibration (cached): offered
    background_calibration_stopped = Signal(str)  # cancelled or failed; one sentence
    ready = Signal()  # the model is loaded and the document's tokens are counted
    job_started = Signal(object)  # StartedJob
    running_changed = Signal(bool)
    job_events = Signal(list)  # each batch of job events, in order
    needle_retention = Signal(str, float)  # a compared strategy, the share of needles it keeps
    recorded = Signal(int)  # the history session a finished job was recorded in
    # the session and version the next Run adds to (None, None: the next Run starts a session)
    current_changed = Signal(object, object)
    # the questions asked along the line of work to the current version (list of Turn), and it
    thread_changed = Signal(object, object)
    version_opened = Signal(object)  # OpenedVersion: an old version shown again
    version_restored = Signal(object)  # VersionInfo rolled back to: the toolbar takes its job
    job_finished = Signal(object)  # JobOutcome, once recorded in the history
    sampling_restored = Signal(object)  # SamplingSettings of a version rolled back to
    waits_changed = Signal(object)  # frozenset: what the person waits for now
    engine_restarted = Signal()  # llama.cpp died and a new engine has the model loaded again
    status = Signal(str, int)  # a status line, milliseconds to show it (0: until the next)
    status_over = Signal(str)  # the wait this status line announced has ended: clear it if shown
    failed = Signal(str)  # something the person must be told about went wrong
    # a Run without a model: the window offers to load one, then calls the callable to run
    # what was asked (unconnected: "Load a model first.")
    model_needed = Signal(object)

    def __init__(self, repo: Repository | None, n_ctx: int = DEFAULT_N_CTX,
                 parent: QObject | None = None) -> None:  # fmt: skip
        super().__init__(parent)
        self._repo = repo
        self._n_ctx = n_ctx  # the context plans are made for until a model is loaded
        self._choices = JobChoices()
        self._model_path: Path | None = None
        self._model_sha = ""
        self._loaded: LoadedModel | None = None
        self._server: ServerInfo | None = None  # jobs run on this server, not a model here
        self._capabilities: EngineCapabilities | None = None
        self._doc: Document | None = None
        self._doc_tokens: int | None = None
        self._doc_estimate: int | None = None  # cl100k tokens, once counted
        self._planner: Planner | None = None  # plans in this process when the child cannot
        self._plan: Plan | None = None
        self._plan_generation = 0
        self._plans_pending: set[int] = set()  # generations of the plans being made
        self._open_generation = 0
        self._open_cancel = threading.Event()  # set: the file being read is no longer wanted
        self._waits: set[str] = set()  # see _wait
        self._wait_messages: dict[str, str] = {}  # the status line each wait began with
        self._plans = PlanProcess()  # plans and counts in a child process, started on first use
        self._plan_pool = QThreadPool(self)
        self._plan_pool.setMaxThreadCount(1)  # plans are answered in the order they were asked
        self._running = False
        self._starting: JobSpec | None = None  # a job whose plans are being made
        self._cancel_start = False
        self._comparing = False
        self._resuming: VersionInfo | None = None  # the version a rollback is generating for
        self._current: tuple[int | None, int | None] = (None, None)  # session, version
        self._thread_reads = 0  # generation of the newest thread read; older answers are dropped
        self._job_place: workbench.JobPlace | None = None  # the running job's document, target
        # The candidates a first load measures (None: calibrate's own); fewer make it quicker.
        self.calibration_trials: tuple[LoadSettings, ...] | None = None
        self._lookup: CalibrationJob | None = None  # a tuned load that asks for a cached choice
        self._calibrate_next: CalibrationJob | None = None  # none cached: measured once loaded
        self._background = BackgroundCalibration(self)
        self._background.progress.connect(self._on_background_progress)
        self._background.finished.connect(self._on_background_finished)
        self._background.stopped.connect(self._on_background_stopped)
        self._engine = EngineThread(self)
        self._wire_engine()

    def _wire_engine(self) -> None:
        # Bound methods only: a lambda connected to the driver's signals would run on the
        # engine thread; a method of this object is queued to the GUI thread.
        w = self._engine.driver
        w.model_loaded.connect(self._on_model_loaded)
        w.server_connected.connect(self._on_server_connected)
        w.server_failed.connect(self._on_server_failed)
        w.unloaded.connect(self._on_unloaded)
        w.tokens_counted.connect(self._on_tokens_counted)
        w.job_events.connect(self._on_job_events)
        w.job_done.connect(self._on_job_done)
        w.crashed.connect(self._on_crashed)
        w.restarted.connect(self._on_restarted)
        w.failed.connect(self.fail)
        w.status.connect(self._on_status)
        w.calibration_progress.connect(self._on_calibration_progress)
        w.calibrated.connect(self._on_calibrated)
        w.calibration_stopped.connect(self._on_calibration_stopped)

    # ----- what it holds (read only) -----

    @property
    def engine(self) -> EngineThread:
        """The engine thread: llama.cpp's (or the server's) one serial owner."""
        return self._engine

    @property
    def plans(self) -> PlanProcess:
        """The planning child."""
        return self._plans

    @property
    def document(self) -> Document | None:
        return self._doc

    @property
    def document_tokens(self) -> int | None:
        """The document's tokens by the loaded model (None: not counted, or no model)."""
        return self._doc_tokens

    @property
    def document_estimate(self) -> int | None:
        """The document's cl100k tokens (None: not counted yet)."""
        return self._doc_estimate

    @property
    def plan(self) -> Plan | None:
        """The plan last shown."""
        return self._plan

    @property
    def choices(self) -> JobChoices:
        """The toolbar's choices the plans are made for."""
        return self._choices

    @property
    def loaded(self) -> LoadedModel | None:
        """The model the jobs run on (a server's too)."""
        return self._loaded

    @property
    def server(self) -> ServerInfo | None:
        """The server the jobs run on (None: a model here, or none)."""
        return self._server

    @property
    def model_path(self) -> Path | None:
        """The model loaded, or being loaded (None: none chosen yet, or a server)."""
        return self._model_path

    @property
    def model_sha256(self) -> str:
        """The model file's sha256 ("" until hashed, or unknown)."""
        return self._model_sha

    @property
    def capabilities(self) -> EngineCapabilities | None:
        """What the engine child said of itself when it last loaded a model."""
        return self._capabilities

    @property
    def current_session(self) -> int | None:
        """The history session of the open document's line of work (None: the next Run
        starts one)."""
        return self._current[0]

    @property
    def current_version(self) -> int | None:
        """The version the next Run branches from (None: the next Run starts a session)."""
        return self._current[1]

    @property
    def running(self) -> bool:
        """A job runs (or is being planned, or a rollback resumes)."""
        return self._running

    @property
    def comparing(self) -> bool:
        """The job running compares strategies side by side."""
        return self._comparing

    @property
    def waiting_for(self) -> frozenset[str]:
        """What runs now: "open", "load", "plan", "run", "calibrate"."""
        return frozenset(self._waits)

    @property
    def cancellable(self) -> bool:
        """Something the person waits for can be cancelled (Esc)."""
        return bool(self._waits & CANCELLABLE)

    # ----- documents -----

    def open_document(self, path: Path) -> None:
        """Read (and decode, and extract) the file in the background, then show and plan it.
        Cancel (or opening another file) drops it: HTML, PDF and DOCX are read in a child
        process (app/core/documents/isolated.py), which is killed at once."""
        self._open_cancel.set()  # a file still being read is not wanted any more
        cancel = self._open_cancel = threading.Event()
        self._open_generation += 1
        generation = self._open_generation
        self._wait("open", True, self.tr("Opening {0}…").format(path.name))

        def load() -> Document | None:
            # ~400k blocks, none of them garbage: the full collections their allocation triggers
            # would hold the GIL ~100 ms each. Frozen, later full collections skip them (they are
            # still freed by reference counting when the document is closed).
            with gc_paused():
                try:
                    doc = read_document(path, cancel=cancel)
                except ReadCancelled:
                    return None  # whoever cancelled it has moved on: nothing to report
                gc.freeze()
            return doc

        def loaded(doc: Document | None) -> None:
            if doc is not None and generation == self._open_generation:
                self._on_document_loaded(doc)

        def failed(message: str) -> None:
            if generation == self._open_generation:
                self._wait("open", False)
                self.fail(message)

        run_in_background(load, loaded, failed)

    def _on_document_loaded(self, doc: Document) -> None:
        self._wait("open", False)
        self._doc = doc
        self._doc_tokens = self._doc_estimate = None
        self._planner = None
        self._set_current(None, None)
        self.document_changed.emit(doc)
        self._find_line_of_work(doc)
        self._show_counts()
        if self._loaded is not None:
            self._count_exact()
        self.update_plan()

    # ----- the plan of what reaches the model -----

    def choose(self, choices: JobChoices) -> None:
        """The toolbar's choices changed: the next plan is made for them."""
        self._choices = choices

    def _framing(self) -> Callable[[str, TokenCounter | None], tuple[str, int]]:
        """(instruction, reserve) per strategy, as the job that Run starts now will plan it:
        the plan the window shows is the plan the job runs. Call it off the GUI thread (it may
        count the question, and build cl100k when no model is loaded)."""
        spec = self._choices.spec((self._choices.strategy,))

        def framing(strategy: str, counter: TokenCounter | None) -> tuple[str, int]:
            return spec.framing(strategy, counter if counter is not None else cl100k())

        return framing

    def _child_key(self, counter: TokenCounter | None) -> str | None:
        """The key the planning child rebuilds ``counter`` (None: cl100k) from, or None: plan
        here. cl100k is named, not built: building it costs ~0.2 s of this thread's time."""
        if self._doc is None or self._doc.path is None:
            return None  # the child reads the document from its file
        return CL100K_KEY if counter is None else counter_key(counter)

    def _frame_source(self) -> FrameSource:
        """What frames the document in a plan, as the job will frame it: the loaded GGUF, or
        the server's template (its GGUF here when given), or None."""
        return self._server.frame if self._server is not None else self._model_path

    def _local_planner(self, counter: TokenCounter) -> Planner:
        assert self._doc is not None
        if self._planner is None or self._planner.counter is not counter:
            self._planner = Planner(self._doc, counter)
        return self._planner

    def _planning(self) -> tuple[PlanProcess | Planner, str | None]:
        """(PlanProcess or Planner, child key): where the plans the window shows are made, with
        the loaded model's counter, else cl100k."""
        counter = self._engine.driver.counter
        key = self._child_key(counter)
        if key is not None:
            return self._plans, key
        return self._local_planner(counter if counter is not None else cl100k()), None

    def update_plan(self, choices: JobChoices | None = None) -> None:
        """Plan the document for the chosen strategy and context, in the background (for
        ``choices`` when given: they are the toolbar's from now on)."""
        if choices is not None:
            self._choices = choices
        if self._doc is None:
            return
        self._plan_generation += 1
        generation = self._plan_generation
        strategy = self._choices.strategy
        question = self._choices.ranked_by
        n_ctx = self._loaded.n_ctx if self._loaded else self._n_ctx
        model, framing, counter = self._frame_source(), self._framing(), self._engine.driver.counter
        doc, (where, key) = self._doc, self._planning()
        ticket = self._plans.ticket() if key is not None else None

        def work() -> tuple[Plan, PlanIndex] | None:
            instruction, reserve = framing(strategy, counter)
            # A 50 MB document's plan and its index are ~400k objects, none of them garbage:
            # as with a document's blocks (open_document), no collection runs while they are
            # made and they are frozen, or full collections of 20-165 ms each hold the GIL.
            with gc_paused():
                plan = workbench.plan_shown(where, doc, key, strategy, model=model, n_ctx=n_ctx,
                                            reserve=reserve, instruction=instruction,
                                            question=question, ticket=ticket)  # fmt: skip
                planned = None if plan is None else (plan, index_plan(plan))  # off the GUI
                gc.freeze()
            return planned

        def settle() -> None:
            self._plans_pending.discard(generation)
            self._wait("plan", bool(self._plans_pending))

        def done(planned: tuple[Plan, PlanIndex] | None) -> None:
            settle()
            if planned is not None and generation == self._plan_generation:
                self._plan, index = planned
                self.plan_changed.emit(self._plan, index)

        def failed(message: str) -> None:
            settle()
            if generation == self._plan_generation:
                self.fail(message)

        self._plans_pending.add(generation)
        self._wait("plan", True, self.tr("Planning {0}…").format(strategy))
        run_in_background(work, done, failed, self._plan_pool)

    def _show_counts(self) -> None:
        if self._doc is None:
            return
        n_ctx = self._loaded.n_ctx if self._loaded else None
        doc = self._doc

        def show(n: int | None) -> None:
            if n is not None and doc is self._doc:
                self._doc_estimate = n
                self.counts_changed.emit(len(doc.text), self._doc_tokens, n, n_ctx)

        if self._doc_estimate is not None:
            show(self._doc_estimate)
            return
        plans, key = self._plans, self._child_key(None)
        run_in_background(lambda: workbench.count_document(plans, doc, key, cl100k), show,
                          self.fail)  # fmt: skip

    def _count_exact(self) -> None:
        """The document's tokens by the loaded model, then ``ready``."""
        doc, counter = self._doc, self._engine.driver.counter
        if doc is None or counter is None:
            return
        key = self._child_key(counter)
        if key is None:  # llama.cpp counts (the engine thread), or a document without a file
            self._engine.request_count.emit(doc.text)
            return
        self.status.emit(self.tr("Counting tokens…"), 0)
        plans = self._plans

        def counted(n: int | None) -> None:
            if n is not None and doc is self._doc:
                self._on_tokens_counted(n, len(doc.text))

        run_in_background(lambda: workbench.count_document(plans, doc, key, lambda: counter),
                          counted, self.fail)  # fmt: skip

    # ----- the model -----

    def load_model(self, path: Path, settings: LoadSettings, *, tuned: bool = False,
                   fresh: bool = False) -> None:  # fmt: skip
        """Load ``path``. With ``tuned`` settings (and calibration on), the model's sha256
        comes first: it keys the calibration. A cached one applies; with none the model loads
        as chosen and is calibrated in the background (:meth:`_on_model_loaded`), unless
        ``fresh``: then it is measured now, before the load."""
        self._background.cancel(quiet=True)  # a calibration of the model being replaced
        self._lookup = self._calibrate_next = None
        self._model_path = Path(path)
        self._server = None  # the engine lets the server go before it loads
        self._model_sha = ""
        self._wait("load", True, self.tr("Loading {0}…").format(Path(path).name))
        if not (tuned and calibrate.automatic()):
            self._engine.request_load.emit(str(path), settings)
            run_in_background(lambda: self._sha256(Path(path)), self._set_model_sha,
                              lambda _m: None)  # fmt: skip
            return
        tune = (fresh, self.calibration_trials)

        def hashed(sha: str) -> None:
            if not isValid(self):  # closed while the file was read
                return
            self._set_model_sha(sha)
            spec = TuneSpec(sha, fresh=True, trials=tune[1])
            if not tune[0]:  # no candidates: the cached choice, else the settings as chosen
                self._lookup = CalibrationJob(Path(path), sha, settings, tune[1])
                spec = TuneSpec(sha, trials=())
            self._engine.request_load_tuned.emit(str(path), settings, spec)

        def unreadable(_message: str) -> None:  # the load says what is wrong with the file
            self._engine.request_load.emit(str(path), settings)

        run_in_background(lambda: self._sha256(Path(path)), hashed, unreadable)

    def connect_server(self, spec: ServerSpec, local: Path | None = None) -> None:
        """Run jobs on the server ``spec`` names; with ``local``, the same model's GGUF here
        gives exact counts and its chat template."""
        if local is not None:
            spec = replace(spec, model_path=str(local))
        self._model_sha = ""
        if local is not None:
            run_in_background(lambda: self._sha256(local), self._set_model_sha, lambda _m: None)
        self._wait("load", True, self.tr("Connecting to {0}…").format(spec.url))
        self._engine.request_connect.emit(spec)

    def _sha256(self, path: Path) -> str:
        """The model file's sha256, read off the GUI thread into the engine session's memory,
        so the history has it when a job ends (the session would otherwise read it then)."""
        return self._engine.driver.session.model_sha256(path)

    def unload(self) -> None:
        """Unload the model, or let the server go."""
        self._engine.request_unload.emit()

    def _on_server_connected(self, info: ServerInfo, loaded: LoadedModel) -> None:
        self._wait("load", False)
        self._server, self._loaded, self._model_path = info, loaded, None
        self.server_connected.emit(info)
        self.status.emit(self.tr("Connected to {0} ({1}), context {2:,} tokens").format(
            info.url, info.model, info.n_ctx), 5000)  # fmt: skip
        self._planner = None  # the server's counts now
        if self._doc is not None:
            self._count_exact()
            self.update_plan()
        else:
            self.ready.emit()

    def _on_server_failed(self, message: str) -> None:
        self._wait("load", False)
        self.server_failed.emit(message)
        self.status.emit(message, 0)

    def _set_model_sha(self, sha: str) -> None:
        self._model_sha = sha

    def _on_calibration_progress(self, done: int, total: int) -> None:
        if self._lookup is not None:  # only the cache was asked: nothing is measured
            return
        self._wait("calibrate", True, self.tr("Calibrating: {0}/{1} settings tried…").format(
            done, total))  # fmt: skip
        self.calibration_progress.emit(done, total)

    def _on_calibrated(self, calibration: calibrate.Calibration, measured_now: bool) -> None:
        self._lookup = None
        self._calibration_ended()
        self.calibrated.emit(calibration, measured_now)

    def _on_calibration_stopped(self, message: str) -> None:
        if self._lookup is not None:  # none cached: the model loads as chosen, then it is
            self._calibrate_next, self._lookup = self._lookup, None  # measured apart
            return
        self._calibration_ended()
        self.calibration_stopped.emit(message)
        self.status.emit(message, 0)

    def _calibration_ended(self) -> None:
        self._wait("calibrate", False)

    def _on_model_loaded(self, info: ModelInfo, loaded: LoadedModel,
                         caps: EngineCapabilities | None) -> None:  # fmt: skip
        self._wait("load", False)
        self._loaded, self._server = loaded, None
        if caps is not None:
            self._capabilities = caps
        self.model_loaded.emit(info, loaded, caps)
        self.status.emit(self.tr("Model loaded in {0:.2f} s").format(loaded.load_seconds), 5000)
        for warning in loaded.warnings:
            self.status.emit(warning, 0)
        self._planner = None  # exact counts now
        if self._doc is not None:
            self._count_exact()
            self.update_plan()
        else:
            self.ready.emit()
        job, self._calibrate_next = self._calibrate_next, None
        if job is not None:  # after the counts and the plan: it waits for them to end
            self._background.start(job)

    # ----- the first calibration, in the background -----

    @property
    def background(self) -> BackgroundCalibration:
        """The calibration that runs apart after a model's first load."""
        return self._background

    def cancel_calibration(self) -> None:
        """The tuned-settings box's Cancel: the calibration in the background, else the one
        before a load."""
        if self._background.running:
            self._background.cancel()
        else:
            self._engine.cancel()

    def _on_background_progress(self, done: int, total: int) -> None:
        self.background_calibration.emit(done, total)

    def _on_background_finished(self, job: CalibrationJob, found: calibrate.Calibration) -> None:
        if job is self._background.job:
            self.calibration_offered.emit(job.model, found)
            self.status.emit(self.tr("Tuned settings are ready: see Speed in the model panel."),
                             0)  # fmt: skip

    def _on_background_stopped(self, job: CalibrationJob, message: str) -> None:
        if job is self._background.job:
            self.background_calibration_stopped.emit(message)

    def _on_unloaded(self) -> None:
        self._background.cancel(quiet=True)
        self._loaded, self._server = None, None
        self.model_unloaded.emit()
        self._planner = None
        self.update_plan()

    def _on_tokens_counted(self, tokens: int, _chars: int) -> None:
        self._doc_tokens = tokens
        self._show_counts()
        self.status.emit(self.tr("Ready"), 0)
        self.ready.emit()

    # ----- jobs -----

    def _spec(self, choices: JobChoices, strategies: tuple[str, ...],
              retry: Callable[[], None]) -> JobSpec | None:  # fmt: skip
        spec = workbench.job_for(choices, strategies, document=self._doc is not None,
                                 model=self._loaded is not None)  # fmt: skip
        if spec is workbench.Refusal.NO_MODEL and self.isSignalConnected(
            QMetaMethod.fromSignal(self.model_needed)
        ):
            self.model_needed.emit(retry)  # the window offers a model, then runs it
            return None
        if isinstance(spec, workbench.Refusal):
            self.fail({
                workbench.Refusal.NO_DOCUMENT: self.tr("Open a document first."),
                workbench.Refusal.NO_MODEL: self.tr("Load a model first."),
                workbench.Refusal.NO_QUESTION: self.tr(
                    "Type the question (or the extract instruction) first."),
            }[spec])  # fmt: skip
            return None
        return spec

    def run_job(self, choices: JobChoices, strategy: str | None = None) -> None:
        """Run the task under ``strategy`` (None: the one chosen)."""
        self._choices = choices
        spec = self._spec(choices, (strategy or choices.strategy,),
                          lambda: self.run_job(choices, strategy))  # fmt: skip
        if spec is not None:
            self._start(spec, comparing=False)

    def run_compare(self, choices: JobChoices, strategies: tuple[str, ...]) -> None:
        """Run the task under each of ``strategies``, side by side, and measure how much of
        the needles each keeps."""
        self._choices = choices
        spec = self._spec(choices, strategies, lambda: self.run_compare(choices, strategies))
        if spec is not None:
            self.measure_needles(strategies)
            self._start(spec, comparing=True)

    def measure_needles(self, strategies: tuple[str, ...]) -> None:
        """Each compared strategy's needle retention (the plans the window shows), in the
        background."""
        choices, doc = self._choices, self._doc
        if not choices.needles or doc is None:
            return
        model, counter = self._frame_source(), self._engine.driver.counter
        n_ctx = self._loaded.n_ctx if self._loaded else self._n_ctx
        where, key = self._planning()

        def work() -> list[tuple[str, float]] | None:
            return workbench.needle_retention(where, doc, key, choices=choices,
                                              strategies=strategies, counter=counter or cl100k(),
                                              model=model, n_ctx=n_ctx)  # fmt: skip

        def done(found: list[tuple[str, float]] | None) -> None:
            if found == []:
                self.status.emit(self.tr("None of the needles occurs in the document."), 0)
            for strategy, retention in found or ():
                self.needle_retention.emit(strategy, retention)

        run_in_background(work, done, self.fail, self._plan_pool)

    def _start(self, spec: JobSpec, *, comparing: bool) -> None:
        """Show the job as running, plan it (in the child when it can), then hand it to the
        engine with a planner that holds those plans: the job plans the document as shown."""
        assert self._loaded is not None and self._doc is not None
        self._running, self._comparing = True, comparing
        session, version = self._current
        self._job_place = workbench.JobPlace(self._doc, versions.Target(session, version))
        self.job_started.emit(StartedJob(self._loaded.n_ctx, spec.strategies, comparing))
        self._set_running(True)
        counter = self._engine.driver.counter
        doc = self._doc
        if counter is None:  # the model is being loaded again: the engine says what is wrong
            self._engine.request_job.emit(JobRequest(spec, doc.text))
            return
        key = self._child_key(counter)
        planner = Planner(doc, counter)
        if key is None:
            self._engine.request_job.emit(JobRequest(spec, doc.text, planner))
            return
        plans, model, n_ctx = self._plans, self._frame_source(), self._loaded.n_ctx

        def work() -> list[Plan] | None:
            return workbench.job_plans(plans, doc, key, spec, counter, model=model, n_ctx=n_ctx)

        def done(made: list[Plan] | None) -> None:
            self._starting = None
            for plan in made or ():
                planner.remember(plan)
            if made is None or self._cancel_start:  # closing, or cancelled while planning
                self._on_job_done(JobOutcome(spec))
                return
            self._engine.request_job.emit(JobRequest(spec, doc.text, planner))

        def failed(message: str) -> None:
            self._starting = None
            self.fail(message)
            self._on_job_done(JobOutcome(spec))

        self._starting, self._cancel_start = spec, False
        self.status.emit(self.tr("Planning…"), 0)
        run_in_background(work, done, failed, self._plan_pool)

    def cancel(self) -> None:
        """Esc: stop whatever the person waits for — the job, the plan, the file being read."""
        if self._running:
            self.status.emit(self.tr("Cancelling…"), 0)
            self._cancel_start = self._starting is not None
            if self._starting is not None:
                self._plans.cancel()  # the job's plans are being made
            self._engine.cancel()
            return
        if "plan" in self._waits:
            self._plan_generation += 1  # a plan made here anyway is dropped when it arrives
            self._plans_pending.clear()
            self._plans.cancel()
            self._wait("plan", False, self.tr("Planning cancelled; the plan shown is the last "
                                              "one made."))  # fmt: skip
        if "open" in self._waits:
            self._open_generation += 1
            self._open_cancel.set()
            self._wait("open", False, self.tr("Opening cancelled."))
        if "calibrate" in self._waits:
            self.status.emit(self.tr("Cancelling the calibration…"), 0)
            self._engine.cancel()

    def _set_running(self, running: bool) -> None:
        self.running_changed.emit(running)
        self._wait("run", running, self.tr("Running…") if running else "")

    def _on_job_events(self, events: list[object]) -> None:
        for ev in events:
            if isinstance(ev, JobFinished) and ev.result.refused:
                self.status.emit(self.tr("Refused: {0}").format(ev.result.refused), 0)
            elif isinstance(ev, RingFallback):  # said while it runs, not only in the record
                text = self.tr("{0} re-prompts each window with the summary so far: {1}")
                self.status.emit(text.format(strategy_label(ev.strategy), ev.reason), 0)
        self.job_events.emit(events)

    def _on_job_done(self, outcome: JobOutcome) -> None:
        self._running = False
        self._set_running(False)
        reasons = ", ".join(finish_label(r.finish_reason) for r in outcome.results)
        reasons = reasons or self.tr("nothing")
        prompt = sum(r.prompt_tokens for r in outcome.results)
        evaluated = sum(r.evaluated_tokens for r in outcome.results)
        if prompt:  # what the KV cache saved: a follow-up question evaluates only itself
            done = self.tr("Done: {0} · {1:,} of {2:,} prompt tokens evaluated, {3:,} reused "
                           "from the KV cache")  # fmt: skip
            self.status.emit(done.format(reasons, evaluated, prompt, max(0, prompt - evaluated)), 0)
        else:
            self.status.emit(self.tr("Done: {0}").format(reasons), 0)
        self._report_audit(outcome)
        self._record(outcome)

    def _report_audit(self, outcome: JobOutcome) -> None:
        """A passed audit is a line in the status bar; a failed one is a warning with findings."""
        audit = outcome.audit
        if audit is None:
            return
        if audit.ok:
            self.status.emit(audit.summary(), 0)
            return
        shown = "\n".join(f"• {f}" for f in audit.findings[:10])
        self.fail(f"{audit.summary()}:\n{shown}")

    # ----- recording a finished job -----

    def _record(self, outcome: JobOutcome) -> None:
        """Store the job through the service the command line records with (a version per
        strategy with its run and KV state, in the current session under the current version,
        or in a new session), or a resumed reply under the version the rollback made."""
        repo, place = self._repo, self._job_place
        resumed, self._resuming, self._job_place = self._resuming, None, None
        if repo is None or not outcome.results or (resumed is None and place is None):
            self.job_finished.emit(outcome)
            return
        if resumed is not None:
            result = outcome.results[0]

            def work() -> versions.Recorded:
                return versions.record_resumed(repo, resumed, result)
        else:
            assert place is not None
            doc, target = place.doc, place.target

            def work() -> versions.Recorded:
                return versions.record_continuing(repo, doc, outcome, target)

        made_on = place.doc if place is not None else None  # a resume: current already set
        run_in_background(work, lambda done: self._recorded(done, outcome, made_on),
                          lambda m: self._record_failed(m, outcome))  # fmt: skip

    def _recorded(self, done: versions.Recorded, outcome: JobOutcome,
                  made_on: Document | None) -> None:  # fmt: skip
        if done.session and made_on is not None and made_on is self._doc:  # still open
            chosen = self._choices.strategy
            self._set_current(done.session,
                              workbench.version_to_go_on_from(done, outcome, chosen))  # fmt: skip
        if done.session:
            self.recorded.emit(done.session)
            if made_on is None:  # a resumed reply: the current version's answer is new
                self._read_thread()
        self.job_finished.emit(outcome)

    def _record_failed(self, message: str, outcome: JobOutcome) -> None:
        self.fail(self.tr("The run was not recorded: {0}").format(message))
        self.job_finished.emit(outcome)

    # ----- the line of work: current session and version -----

    def _set_current(self, session: int | None, version: int | None) -> None:
        if (session, version) != self._current:
            self._current = (session, version)
            self.current_changed.emit(session, version)
            self._read_thread()

    def _read_thread(self) -> None:
        """The questions along the line of work to the current version, read in the background
        (a follow-up question continues this thread)."""
        repo, version = self._repo, self._current[1]
        self._thread_reads += 1
        generation = self._thread_reads
        if repo is None or version is None:
            self.thread_changed.emit([], None)
            return

        def done(turns: list[versions.Turn]) -> None:
            if generation == self._thread_reads:
                self.thread_changed.emit(turns, version)

        run_in_background(lambda: versions.thread(repo, version), done,
                          lambda m: log.warning("the thread was not read: %s", m))  # fmt: skip

    def _find_line_of_work(self, doc: Document) -> None:
        """Opening a document picks its latest session (and that session's newest version) as
        current, so the next Run goes on with the document's line of work; a document never
        run starts a session at its first Run."""
        repo = self._repo
        if repo is None:
            return

        def found(line: tuple[int, int | None] | None) -> None:
            if line is not None and doc is self._doc and self._current == (None, None):
                self._set_current(*line)

        run_in_background(lambda: versions.latest_line(repo, doc), found, self.fail)

    def open_version(self, version_id: int) -> None:
        """Show an old version again (``version_opened``): its recorded reply for the output
        buffer, and, when it was made on the open document's text, its plan painted on the
        document (``plan_changed``; the plan shown is that plan until the next one is made).
        A run records its plan's figures, not its spans, so the plan is made again, in the
        background, when that is cheap and certain: with the model it ran on loaded (its
        tokenizer and chat frame), for its strategy, context, task and prompt, and shown only
        when it matches the recorded figures. The KV map is not rebuilt: it needs the run's
        events, which are not recorded. Opening does not change the current version (a
        rollback does)."""
        repo, doc = self._repo, self._doc
        if repo is None:
            return
        replan = self._replanner()

        def work() -> tuple[versions.OpenedVersion, Plan | None, PlanIndex | None]:
            opened = versions.open_version(repo, version_id)
            plan = None
            if doc is not None and opened.document_sha256 == doc.sha256:
                plan = opened.plan if opened.plan is not None else replan(opened)
            return opened, plan, index_plan(plan) if plan is not None else None

        def done(got: tuple[versions.OpenedVersion, Plan | None, PlanIndex | None]) -> None:
            opened, plan, index = got
            if plan is not None and index is not None and doc is self._doc:
                self._plan = plan
                self.plan_changed.emit(plan, index)
            self.version_opened.emit(opened)

        run_in_background(work, done, self.fail, self._plan_pool)

    def _replanner(self) -> Callable[[versions.OpenedVersion], Plan | None]:
        """A function (for the plan pool) that makes a version's plan again as its job made
        it, or None when the model it ran on is not the one loaded or the plan differs from
        the recorded figures."""
        counter, sha, model = self._engine.driver.counter, self._model_sha, self._frame_source()
        doc, (where, key) = self._doc, self._planning()

        def replan(opened: versions.OpenedVersion) -> Plan | None:
            if counter is None or doc is None or not sha or opened.version.model_sha256 != sha:
                return None
            return workbench.replan_version(where, doc, key, opened, counter, model=model)

        return replan

    # ----- rollback with the KV state -----

    def resume_rollback(self, version: VersionInfo, has_kv: bool) -> None:
        """A version the history panel made by rolling back: its job and sampling come back
        (``version_restored``, ``sampling_restored``), it becomes the current version when it
        is of the open document (the next Run branches from it), and with a KV state for the
        loaded model and context its reply resumes from that state."""
        # the version's sampling comes back with it: the resumed reply and the next Run use it
        self.sampling_restored.emit(from_version(version.settings))
        self.version_restored.emit(version)
        repo, loaded, doc, sha = self._repo, self._loaded, self._doc, self._model_sha
        if repo is None:
            return
        resumable = has_kv and loaded is not None and bool(sha)

        n_ctx = loaded.n_ctx if loaded is not None else 0
        cache_type = loaded.kv_cache_type if loaded is not None else None

        def work() -> workbench.Rollback:
            return workbench.rollback(repo, version, doc, resumable=resumable, model_sha256=sha,
                                      n_ctx=n_ctx, cache_type=cache_type)  # fmt: skip

        def done(answer: workbench.Rollback) -> None:
            same, spec = answer.same_document, answer.resume
            if same and doc is self._doc:
                self._set_current(version.session, version.id)
            if not resumable:
                self.status.emit(self.tr("Rolled back to a new version #{0}; run it to see its "
                                         "output.").format(version.id), 0)  # fmt: skip
            elif spec is None:
                self.status.emit(
                    self.tr("No KV state for the loaded model and context; run it again."), 0
                )
            else:
                self._resume(version, spec)

        run_in_background(work, done, self.fail)

    def _resume(self, version: VersionInfo, spec: ResumeSpec) -> None:
        """Generate the rolled-back version's reply again from its saved KV state."""
        assert self._loaded is not None
        self._running, self._comparing = True, False
        self.job_started.emit(StartedJob(self._loaded.n_ctx, (version.strategy,), resumed=True,
                                         version=version))  # fmt: skip
        self._set_running(True)
        self.status.emit(self.tr("Resuming from the saved KV state…"), 0)
        self._resuming = version
        self._engine.request_resume.emit(spec)

    # ----- waits, errors, the engine's own news -----

    def _wait(self, what: str, waiting: bool, message: str = "") -> None:
        """What the person waits for: the window shows a busy bar while anything runs, and
        Cancel (and Esc) while something that can be cancelled does."""
        if waiting:
            self._waits.add(what)
        else:
            self._waits.discard(what)
        self.waits_changed.emit(frozenset(self._waits))
        self._background.set_busy(bool(self._waits))  # its trials wait for the person's work
        if message:
            self.status.emit(message, 0)
        if waiting and message:
            self._wait_messages[what] = message
        elif not waiting and (began := self._wait_messages.pop(what, "")):
            self.status_over.emit(began)  # "Planning middle…" must not outlast the plan

    def fail(self, message: str) -> None:
        """Tell the person something went wrong (``failed``); a load or a calibration being
        waited for has ended with it (the engine answers a failed load this way)."""
        log.warning("%s", message)
        self._wait("load", False)
        self._calibration_ended()
        self.failed.emit(message)

    def _on_status(self, message: str) -> None:
        if self._lookup is None:  # (a load asking for the cached choice says "Calibrating…")
            self.status.emit(message, 0)

    def _on_restarted(self) -> None:
        self.status.emit(self.tr("Engine restarted"), 0)
        self.engine_restarted.emit()

    def _on_crashed(self, message: str) -> None:
        self.fail(self.tr("The engine stopped: {0}. Starting it again…").format(message))

    def close(self) -> None:
        """Stop everything: the file being read, the engine, the planning child (a plan in
        flight ends at once, superseded) and the pool waiting on it."""
        self._open_generation += 1
        self._open_cancel.set()  # a document being read in its child process: killed
        self._background.close()
        self._engine.stop()
        self._plans.close()
        self._plan_pool.waitForDone(10_000)

