"""What the workbench model (model.py) needs from the world, declared without Qt.

The model decides; it never runs slow work itself, never talks to llama.cpp, never says a
sentence. Those go through these ports: a :class:`Scheduler` that runs work off the caller's
thread and answers back on it, an :class:`EnginePort` (the requests the engine's serial owner
takes), a :class:`CalibrationPort` (the first calibration, apart) and a :class:`WorkbenchEvents`
sink for what changed. The window's `SessionModel` implements them with Qt (pools, the engine
thread, signals) and translates each :class:`Message`; a unit test implements them with plain
Python.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from app.core.calibrate import Calibration
from app.core.documents import Document
from app.core.engine.gguf import ModelInfo
from app.core.engine.remote import ServerInfo
from app.core.engine.types import (
    EngineCapabilities,
    LoadedModel,
    LoadSettings,
    SamplingSettings,
)
from app.core.history_records import VersionInfo
from app.core.planning.plan import Plan
from app.core.planning.strategies import Planner
from app.core.tokens import TokenCounter
from app.services.history import Changes
from app.services.job_engine import ServerSpec
from app.services.jobs import JobOutcome, JobSpec, ResumeSpec
from app.services.question_plans import SideBySide
from app.services.versions import OpenedVersion
from app.services.workbench.decisions import StartedJob

# "plan": one thread, answers in the order asked (the planning child is waited on there);
# "io": any worker (store calls, hashing, reading a file)
Lane = Literal["plan", "io"]


class Scheduler(Protocol):
    def submit(self, work: Callable[[], Any], done: Callable[[Any], None],
               failed: Callable[[str], None], lane: Lane = "io") -> None:  # fmt: skip
        """Run ``work()`` off the caller's thread, then ``done(result)`` or ``failed(one
        sentence)`` back on it. ``work`` must hold only plain values."""


@dataclass(frozen=True)
class JobRequest:
    """A job handed to the engine: what to do, on which text, and the planner holding the plans
    the window showed (the job runs them without planning again; None: the bare text is
    planned)."""

    spec: JobSpec
    text: str
    planner: Planner | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class TuneSpec:
    """Load with the speed settings calibrated for this model and machine, measuring them first
    when there are none yet (or when ``fresh``)."""

    model_sha256: str
    fresh: bool = False
    trials: tuple[LoadSettings, ...] | None = None  # the candidates; None: calibrate's own


@dataclass(frozen=True)
class CalibrationJob:
    """What to calibrate: the model, its sha256 (the cache key), the settings it was loaded
    with (their context and cache type; the speed knobs are what is measured) and the
    candidates (None: calibrate's own)."""

    model: Path
    model_sha256: str
    base: LoadSettings
    trials: tuple[LoadSettings, ...] | None = None


class EnginePort(Protocol):
    """The engine's one serial owner: each request is queued and answered later (the model's
    ``on_*`` methods); ``cancel`` and ``counter`` answer at once, from the caller's thread."""

    def load(self, path: str, settings: LoadSettings) -> None: ...
    def load_tuned(self, path: str, settings: LoadSettings, tune: TuneSpec) -> None: ...
    def connect_server(self, spec: ServerSpec) -> None: ...
    def connect_pool(self, specs: tuple[ServerSpec, ...], smallest_context: bool) -> None: ...
    def unload(self) -> None: ...
    def count(self, text: str) -> None: ...
    def run_job(self, request: JobRequest) -> None: ...
    def resume(self, spec: ResumeSpec) -> None: ...
    def cancel(self) -> None: ...

    @property
    def counter(self) -> TokenCounter | None:
        """The loaded model's exact counter (None: no model)."""

    def model_sha256(self, path: Path) -> str:
        """The model file's sha256 (slow: called off the caller's thread)."""


class CalibrationPort(Protocol):
    """The first calibration of a model, apart from the engine (BackgroundCalibration)."""

    job: CalibrationJob | None  # the one running or last run (None: forgotten)

    @property
    def running(self) -> bool: ...
    def start(self, job: CalibrationJob) -> None: ...
    def set_busy(self, busy: bool) -> None: ...
    def cancel(self, *, quiet: bool = False) -> None: ...


class Notice(enum.Enum):
    """What the model tells the person; the face says it in the person's language."""

    TEXT = enum.auto()  # args: a sentence made elsewhere, shown as it is
    OPENING = enum.auto()  # file name
    OPENING_CANCELLED = enum.auto()
    PLANNING_STRATEGY = enum.auto()  # strategy
    PLANNING = enum.auto()
    PLANNING_CANCELLED = enum.auto()
    COUNTING = enum.auto()
    READY = enum.auto()
    LOADING = enum.auto()  # file name
    CONNECTING = enum.auto()  # url
    CONNECTED = enum.auto()  # url, model, context
    MODEL_LOADED = enum.auto()  # seconds
    CALIBRATING = enum.auto()  # settings tried, settings to try
    CANCELLING_CALIBRATION = enum.auto()
    TUNED_READY = enum.auto()
    NO_DOCUMENT = enum.auto()
    NO_MODEL = enum.auto()
    NO_QUESTION = enum.auto()
    NO_NEEDLES = enum.auto()
    RUNNING = enum.auto()
    CANCELLING = enum.auto()
    REFUSED = enum.auto()  # the reason
    RING_FALLBACK = enum.auto()  # strategy, reason
    DONE = enum.auto()  # finish reasons
    DONE_REUSED = enum.auto()  # finish reasons, evaluated, prompt, reused tokens
    NOT_RECORDED = enum.auto()  # the error
    ROLLED_BACK = enum.auto()  # version id
    RESUMING = enum.auto()
    ENGINE_RESTARTED = enum.auto()
    ENGINE_STOPPED = enum.auto()  # the error


@dataclass(frozen=True)
class Message:
    """A notice and its arguments (plain values)."""

    notice: Notice
    args: tuple[Any, ...] = ()

    @classmethod
    def text(cls, sentence: str) -> Message:
        return cls(Notice.TEXT, (sentence,))

    def __str__(self) -> str:
        return str(self.args[0]) if self.notice is Notice.TEXT else f"{self.notice.name}{self.args}"


class WorkbenchEvents(Protocol):
    """What changed, one method per event (the window's signals of the same names)."""

    def document_changed(self, doc: Document) -> None: ...
    def counts_changed(self, chars: int, tokens: int | None, estimate: int,
                       n_ctx: int | None) -> None: ...  # fmt: skip
    def plan_changed(self, plan: Plan, index: object) -> None: ...
    # several questions under `retrieve`: their plans side by side (None: one question)
    def question_plans_changed(self, plans: SideBySide | None) -> None: ...
    def model_loaded(self, info: ModelInfo, loaded: LoadedModel,
                     caps: EngineCapabilities | None) -> None: ...  # fmt: skip
    def server_connected(self, info: ServerInfo) -> None: ...
    def server_failed(self, message: str) -> None: ...
    def model_unloaded(self) -> None: ...
    def calibration_progress(self, done: int, total: int) -> None: ...
    def calibrated(self, calibration: Calibration, measured_now: bool) -> None: ...
    def calibration_stopped(self, message: str) -> None: ...
    def background_calibration(self, done: int, total: int) -> None: ...
    def calibration_offered(self, model: Path, calibration: Calibration) -> None: ...
    def background_calibration_stopped(self, message: str) -> None: ...
    def ready(self) -> None: ...
    def job_started(self, job: StartedJob) -> None: ...
    def running_changed(self, running: bool) -> None: ...
    def job_events(self, events: list[object]) -> None: ...
    def needle_retention(self, strategy: str, share: float) -> None: ...
    def recorded(self, session: int) -> None: ...
    def current_changed(self, session: int | None, version: int | None) -> None: ...
    def thread_changed(self, turns: list[Any], version: int | None) -> None: ...
    def version_opened(self, opened: OpenedVersion) -> None: ...
    def version_restored(self, version: VersionInfo) -> None: ...
    # the history changed (a rollback made a version): every view of it reads what changed
    def history_changed(self, changes: Changes) -> None: ...
    def job_finished(self, outcome: JobOutcome) -> None: ...
    def sampling_restored(self, sampling: SamplingSettings) -> None: ...
    def waits_changed(self, waits: frozenset[str]) -> None: ...
    def engine_restarted(self) -> None: ...
    def status(self, message: Message, ms: int) -> None: ...
    def status_over(self, message: Message) -> None: ...
    def failed(self, message: Message) -> None: ...

    def model_needed(self, retry: Callable[[], None]) -> bool:
        """A Run without a model: True when someone offers one (and calls ``retry``)."""


# the events by name: a face maps each to a signal of the same name
EVENTS: tuple[str, ...] = tuple(
    name for name, member in vars(WorkbenchEvents).items()
    if not name.startswith("_") and callable(member)
)  # fmt: skip
