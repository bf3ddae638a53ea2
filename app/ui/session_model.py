"""The window's session: the Qt bridge over the workbench model (app/services/workbench/model.py).

What the window holds and decides (the document, its counts and plan, the model, the job, the
line of work, what the person waits for) lives in the Qt-free :class:`WorkbenchModel`, as
napari's ``ViewerModel`` lives under its Qt viewer. This object gives it its ports: Qt's pools
as its scheduler, the engine thread as its engine, the background calibration; it turns the
engine's and the calibration's signals into the model's ``on_*`` calls on the GUI thread, and
each of the model's events into a signal of the same name, its notices said in the person's
language. Panels subscribe to the signals; the window only wires them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Generic, TypeVar, cast

from PySide6.QtCore import QMetaMethod, QObject, Signal

from app.core.documents import Document
from app.core.engine.remote import ServerInfo
from app.core.engine.types import DEFAULT_N_CTX, EngineCapabilities, LoadedModel, LoadSettings
from app.core.planning.plan import Plan
from app.core.planning.process import PlanProcess
from app.services.history import Changes, History, VersionInfo
from app.services.job_engine import ServerSpec
from app.services.workbench.decisions import JobChoices, StartedJob
from app.services.workbench.model import WorkbenchModel
from app.services.workbench.ports import EVENTS, Message, Notice, WorkbenchEvents
from app.ui.background import PoolScheduler
from app.ui.background_calibration import BackgroundCalibration
from app.ui.engine_thread import EngineThread
from app.ui.i18n import finish_label, strategy_label
from app.ui.plan_index import index_plan

__all__ = ["JobChoices", "SessionModel", "StartedJob"]
T = TypeVar("T")


class _Held(Generic[T]):
    """A property of the session read from the workbench model (``part``: one of its parts)."""

    def __init__(self, part: str = "", *, settable: bool = False) -> None:
        self._part, self._settable, self._name = part, settable, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def _holder(self, session: SessionModel) -> object:
        return getattr(session._model, self._part) if self._part else session._model

    def __get__(self, session: SessionModel | None, owner: type | None = None) -> T:
        if session is None:
            return cast(T, self)
        return cast(T, getattr(self._holder(session), self._name))

    def __set__(self, session: SessionModel, value: T) -> None:
        if not self._settable:
            raise AttributeError(f"{self._name} is read only")
        setattr(self._holder(session), self._name, value)


class _Queued(QObject):
    """A GUI-thread receiver: another thread's signal reaches ``target`` queued, not there."""

    def __init__(self, parent: QObject, target: Callable[..., None]) -> None:
        super().__init__(parent)
        self._target = target

    def call(self, *args: Any) -> None:
        self._target(*args)


class SessionModel(QObject):
    """The open document and its counts, the plan shown, the model or server the jobs run on,
    the job running and what the person waits for; read through its properties, changed by
    its methods, and every change said by a signal."""

    document_changed = Signal(object)  # the Document opened
    # characters, exact tokens (None: not counted yet), cl100k estimate, context (None: no model)
    counts_changed = Signal(int, object, int, object)
    plan_changed = Signal(object, object)  # the Plan now shown, its PlanIndex
    # several questions under `retrieve`: their plans side by side (SideBySide; None: one)
    question_plans_changed = Signal(object)
    model_loaded = Signal(object, object, object)  # ModelInfo, LoadedModel, capabilities or None
    server_connected = Signal(object)  # ServerInfo: jobs run there now
    server_failed = Signal(str)  # a connection that could not be made; one sentence
    pool_changed = Signal(list)  # the pool's servers (list of PoolServer; []: none) as they are
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
    history_changed = Signal(object)  # Changes: what a rollback changed in the history
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

    # what it holds, read from the workbench model (see its properties)
    plans: _Held[PlanProcess] = _Held()
    document: _Held[Document | None] = _Held()
    document_tokens: _Held[int | None] = _Held()
    document_estimate: _Held[int | None] = _Held()
    plan: _Held[Plan | None] = _Held()
    choices: _Held[JobChoices] = _Held()
    current_session: _Held[int | None] = _Held()
    current_version: _Held[int | None] = _Held()
    running: _Held[bool] = _Held()
    comparing: _Held[bool] = _Held()
    resuming: _Held[VersionInfo | None] = _Held()
    waiting_for: _Held[frozenset[str]] = _Held()
    cancellable: _Held[bool] = _Held()
    loaded: _Held[LoadedModel | None] = _Held("engine_state")
    server: _Held[ServerInfo | None] = _Held("engine_state")
    model_path: _Held[Path | None] = _Held("engine_state")
    model_sha256: _Held[str] = _Held("engine_state")
    capabilities: _Held[EngineCapabilities | None] = _Held("engine_state")
    # the candidates a first load measures (None: calibrate's own); fewer make it quicker
    calibration_trials: _Held[tuple[LoadSettings, ...] | None] = _Held("engine_state",
                                                                       settable=True)

    def __init__(self, store: History | None, n_ctx: int = DEFAULT_N_CTX,
                 parent: QObject | None = None) -> None:  # fmt: skip
        super().__init__(parent)
        self._background = BackgroundCalibration(self)
        self._engine = EngineThread(self)
        self._pools = PoolScheduler(self)
        self._lines: dict[Message, str] = {}  # status lines as said (see _said)
        self._model = WorkbenchModel(store, self._events(), engine=self._engine,
                                     scheduler=self._pools, calibration=self._background,
                                     n_ctx=n_ctx, index=index_plan)  # fmt: skip
        m, e, w, b = self._model, self._model.engine_state, self._engine.driver, self._background
        for signal, target in (
            (w.model_loaded, m.on_model_loaded), (w.server_connected, m.on_server_connected),
            (w.server_failed, e.on_server_failed), (w.unloaded, m.on_unloaded),
            (w.tokens_counted, m.on_tokens_counted), (w.job_events, m.on_job_events),
            (w.job_done, m.on_job_done), (w.crashed, m.on_crashed),
            (w.restarted, m.on_restarted), (w.failed, m.on_failed), (w.status, e.on_status),
            (w.calibration_progress, e.on_calibration_progress),
            (w.calibrated, e.on_calibrated), (w.calibration_stopped, e.on_calibration_stopped),
            (b.progress, e.on_background_progress), (b.finished, e.on_background_finished),
            (b.stopped, e.on_background_stopped), (w.pool_changed, self.pool_changed.emit),
        ):  # fmt: skip
            signal.connect(_Queued(self, target).call)

    def _events(self) -> WorkbenchEvents:
        """The model's events as this object's signals of the same names, its notices said in
        the person's language."""
        sink = SimpleNamespace(**{name: getattr(self, name).emit for name in EVENTS})
        sink.status = lambda message, ms: self.status.emit(self._said(message), ms)
        sink.status_over = lambda message: self.status_over.emit(  # the line as it was said
            self._lines.pop(message, None) or self._say(message))  # fmt: skip
        sink.failed = lambda message: self.failed.emit(self._say(message))
        sink.model_needed = self._offer_model
        return cast(WorkbenchEvents, sink)

    def _offer_model(self, retry: Callable[[], None]) -> bool:
        if not self.isSignalConnected(QMetaMethod.fromSignal(self.model_needed)):
            return False  # no one offers a model: "Load a model first."
        self.model_needed.emit(retry)  # the window offers a model, then runs it
        return True

    @property
    def engine(self) -> EngineThread:
        """The engine thread: llama.cpp's (or the server's) one serial owner."""
        return self._engine

    @property
    def background(self) -> BackgroundCalibration:
        """The calibration that runs apart after a model's first load."""
        return self._background

    # ----- what the person asks for (WorkbenchModel says what each does) -----

    def open_document(self, path: Path) -> None:
        self._model.open_document(path)

    def choose(self, choices: JobChoices) -> None:
        self._model.choose(choices)

    def update_plan(self, choices: JobChoices | None = None) -> None:
        self._model.update_plan(choices)

    def load_model(self, path: Path, settings: LoadSettings, *, tuned: bool = False,
                   fresh: bool = False) -> None:  # fmt: skip
        self._model.engine_state.load_model(path, settings, tuned=tuned, fresh=fresh)

    def connect_server(self, spec: ServerSpec, local: Path | None = None) -> None:
        self._model.engine_state.connect_server(spec, local)

    def connect_pool(self, specs: tuple[ServerSpec, ...], smallest_context: bool = False,
                     local: Path | None = None) -> None:  # fmt: skip
        self._model.engine_state.connect_pool(specs, smallest_context, local)

    def unload(self) -> None:
        self._model.engine_state.unload()

    def cancel_calibration(self) -> None:
        self._model.engine_state.cancel_calibration()

    def run_job(self, choices: JobChoices, strategy: str | None = None) -> None:
        self._model.run_job(choices, strategy)

    def run_compare(self, choices: JobChoices, strategies: tuple[str, ...]) -> None:
        self._model.run_compare(choices, strategies)

    def measure_needles(self, strategies: tuple[str, ...]) -> None:
        self._model.measure_needles(strategies)

    def cancel(self) -> None:
        self._model.cancel()

    def open_version(self, version_id: int) -> None:
        self._model.open_version(version_id)

    def rollback(self, version_id: int, resume: bool) -> None:
        self._model.rollback(version_id, resume)

    def on_history_changed(self, changes: Changes) -> None:
        """What the History panel changed (the line of work follows a deletion)."""
        self._model.on_history_changed(changes)

    def fail(self, message: str) -> None:
        """Tell the person ``message`` (``failed``); a load or calibration waited for ends."""
        self._model.fail(Message.text(message))

    def close(self) -> None:
        """Stop everything: the file being read, the planning child (a plan in flight ends at
        once, superseded), the calibration, the engine, and the pool waiting on the child."""
        self._model.close()
        self._background.close()
        self._engine.stop()
        self._pools.plan_pool.waitForDone(10_000)

    # ----- the model's notices, in the person's language -----

    def _said(self, message: Message) -> str:
        """``message`` said now, and kept (the latest 16) for the end of its wait."""
        self._lines[message] = text = self._say(message)
        self._lines = dict(list(self._lines.items())[-16:])
        return text

    def _say(self, message: Message) -> str:
        notice, args = message.notice, message.args
        if notice is Notice.TEXT:
            return str(args[0])
        if notice in (Notice.DONE, Notice.DONE_REUSED):  # the finish reasons, said
            args = (", ".join(finish_label(r) for r in args[0]) or self.tr("nothing"), *args[1:])
        elif notice is Notice.RING_FALLBACK:
            args = (strategy_label(args[0]), *args[1:])
        text = {
            Notice.OPENING: self.tr("Opening {0}…"),
            Notice.OPENING_CANCELLED: self.tr("Opening cancelled."),
            Notice.PLANNING_STRATEGY: self.tr("Planning {0}…"),
            Notice.PLANNING: self.tr("Planning…"),
            Notice.PLANNING_CANCELLED: self.tr("Planning cancelled; the plan shown is the last "
                                               "one made."),
            Notice.COUNTING: self.tr("Counting tokens…"),
            Notice.READY: self.tr("Ready"),
            Notice.LOADING: self.tr("Loading {0}…"),
            Notice.CONNECTING: self.tr("Connecting to {0}…"),
            Notice.CONNECTED: self.tr("Connected to {0} ({1}), context {2:,} tokens"),
            Notice.MODEL_LOADED: self.tr("Model loaded in {0:.2f} s"),
            Notice.CALIBRATING: self.tr("Calibrating: {0}/{1} settings tried…"),
            Notice.CANCELLING_CALIBRATION: self.tr("Cancelling the calibration…"),
            Notice.TUNED_READY: self.tr("Tuned settings are ready: see Speed in the model panel."),
            Notice.NO_DOCUMENT: self.tr("Open a document first."),
            Notice.NO_MODEL: self.tr("Load a model first."),
            Notice.NO_QUESTION: self.tr("Type the question (or the extract instruction) first."),
            Notice.NO_NEEDLES: self.tr("None of the needles occurs in the document."),
            Notice.RUNNING: self.tr("Running…"),
            Notice.CANCELLING: self.tr("Cancelling…"),
            Notice.REFUSED: self.tr("Refused: {0}"),
            Notice.RING_FALLBACK: self.tr("{0} re-prompts each window with the summary so far: "
                                          "{1}"),
            Notice.DONE: self.tr("Done: {0}"),
            Notice.DONE_REUSED: self.tr("Done: {0} · {1:,} of {2:,} prompt tokens evaluated, "
                                        "{3:,} reused from the KV cache"),
            Notice.NOT_RECORDED: self.tr("The run was not recorded: {0}"),
            Notice.ROLLED_BACK: self.tr("Rolled back to a new version #{0}; its recorded reply "
                                        "is shown, and Run generates it again."),
            Notice.RESUMING: self.tr("Resuming from the saved KV state…"),
            Notice.ENGINE_RESTARTED: self.tr("Engine restarted"),
            Notice.ENGINE_STOPPED: self.tr("The engine stopped: {0}. Starting it again…"),
        }[notice]  # fmt: skip
        return text.format(*args)
