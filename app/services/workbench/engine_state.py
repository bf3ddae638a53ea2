"""The workbench's model or server: what the jobs run on, how it was loaded, and its calibration.

Part of the Qt-free workbench (model.py): loading a model (its sha256 first when
tuned settings are asked: it keys the calibration), connecting to a server, the engine's
answers, and the bookkeeping of a calibration looked up before a load or measured apart after
it. What the document needs once a model is there (exact counts, a new plan) is the workbench
model's; this part says what it holds and what changed.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from app.core import calibrate
from app.core.engine.gguf import ModelInfo
from app.core.engine.remote import ServerInfo
from app.core.engine.types import EngineCapabilities, LoadedModel, LoadSettings
from app.services.job_engine import ServerSpec
from app.services.workbench.ports import (
    CalibrationJob,
    CalibrationPort,
    EnginePort,
    Message,
    Notice,
    Scheduler,
    TuneSpec,
    WorkbenchEvents,
)
from app.services.workbench.waits import Waits


class EngineState:
    """The model loaded (or the server connected) and its calibration; changed by the
    person's requests and the engine's answers (``on_*``)."""

    def __init__(self, events: WorkbenchEvents, *, engine: EnginePort, scheduler: Scheduler,
                 calibration: CalibrationPort, waits: Waits) -> None:  # fmt: skip
        self._events = events
        self._engine = engine
        self._scheduler = scheduler
        self._calibration = calibration
        self._waits = waits
        self.model_path: Path | None = None  # loaded or being loaded (None: none, or a server)
        self.model_sha256 = ""  # the model file's sha256 ("" until hashed, or unknown)
        self.loaded: LoadedModel | None = None  # what the jobs run on (a server's too)
        self.server: ServerInfo | None = None  # the server the jobs run on (None: none, a model)
        self.capabilities: EngineCapabilities | None = None  # said at the last model's load
        # The candidates a first load measures (None: calibrate's own); fewer make it quicker.
        self.calibration_trials: tuple[LoadSettings, ...] | None = None
        self._lookup: CalibrationJob | None = None  # a tuned load that asks for a cached choice
        self._calibrate_next: CalibrationJob | None = None  # none cached: measured once loaded

    def load_model(self, path: Path, settings: LoadSettings, *, tuned: bool = False,
                   fresh: bool = False) -> None:  # fmt: skip
        """Load ``path``. With ``tuned`` settings (and calibration on), the model's sha256
        comes first: it keys the calibration. A cached one applies; with none the model loads
        as chosen and is calibrated in the background (:meth:`on_model_loaded`), unless
        ``fresh``: then it is measured now, before the load."""
        self._calibration.cancel(quiet=True)  # a calibration of the model being replaced
        self._lookup = self._calibrate_next = None
        self.model_path = path = Path(path)
        self.server = None  # the engine lets the server go before it loads
        self.model_sha256 = ""
        self._waits.set("load", True, Message(Notice.LOADING, (path.name,)))
        # the sha256 is read into the engine session's memory off this thread, so the history
        # has it when a job ends (the session would otherwise read it then)
        sha256 = self._engine.model_sha256
        if not (tuned and calibrate.automatic()):
            self._engine.load(str(path), settings)
            self._scheduler.submit(lambda: sha256(path), self._set_sha, lambda _m: None)
            return
        trials = self.calibration_trials

        def hashed(sha: str) -> None:
            self._set_sha(sha)
            spec = TuneSpec(sha, fresh=True, trials=trials)
            if not fresh:  # no candidates: the cached choice, else the settings as chosen
                self._lookup = CalibrationJob(path, sha, settings, trials)
                spec = TuneSpec(sha, trials=())
            self._engine.load_tuned(str(path), settings, spec)

        def unreadable(_message: str) -> None:  # the load says what is wrong with the file
            self._engine.load(str(path), settings)

        self._scheduler.submit(lambda: sha256(path), hashed, unreadable)

    def connect_server(self, spec: ServerSpec, local: Path | None = None) -> None:
        """Run jobs on the server ``spec`` names; with ``local``, the same model's GGUF here
        gives exact counts and its chat template."""
        if local is not None:
            spec = replace(spec, model_path=str(local))
        self.model_sha256 = ""
        if local is not None:
            sha256 = self._engine.model_sha256
            self._scheduler.submit(lambda: sha256(local), self._set_sha, lambda _m: None)
        self._waits.set("load", True, Message(Notice.CONNECTING, (spec.url,)))
        self._engine.connect_server(spec)

    def connect_pool(self, specs: tuple[ServerSpec, ...], smallest_context: bool = False,
                     local: Path | None = None) -> None:  # fmt: skip
        """Run jobs on a pool of the servers ``specs`` name (each job on the first that
        answers, moved to the next when that one is lost); ``smallest_context`` plans every
        job for the smallest context of servers that report different ones; ``local`` as for
        one server."""
        if local is not None:
            specs = tuple(replace(spec, model_path=str(local)) for spec in specs)
        self.model_sha256 = ""
        if local is not None:
            sha256 = self._engine.model_sha256
            self._scheduler.submit(lambda: sha256(local), self._set_sha, lambda _m: None)
        urls = ", ".join(spec.url for spec in specs)
        self._waits.set("load", True, Message(Notice.CONNECTING, (urls,)))
        self._engine.connect_pool(specs, smallest_context)

    def unload(self) -> None:
        """Unload the model, or let the server go."""
        self._engine.unload()

    def _set_sha(self, sha: str) -> None:
        self.model_sha256 = sha

    def on_server_connected(self, info: ServerInfo, loaded: LoadedModel) -> None:
        self._waits.set("load", False, None)
        self.server, self.loaded, self.model_path = info, loaded, None
        self._events.server_connected(info)
        self._events.status(Message(Notice.CONNECTED, (info.url, info.model, info.n_ctx)), 5000)

    def on_server_failed(self, message: str) -> None:
        self._waits.set("load", False, None)
        self._events.server_failed(message)
        self._events.status(Message.text(message), 0)

    def on_model_loaded(self, info: ModelInfo, loaded: LoadedModel,
                        caps: EngineCapabilities | None) -> None:  # fmt: skip
        self._waits.set("load", False, None)
        self.loaded, self.server = loaded, None
        if caps is not None:
            self.capabilities = caps
        self._events.model_loaded(info, loaded, caps)
        self._events.status(Message(Notice.MODEL_LOADED, (loaded.load_seconds,)), 5000)
        for warning in loaded.warnings:
            self._events.status(Message.text(warning), 0)

    def calibrate_apart(self) -> None:
        """After a load with no calibration cached (and after the counts and the plan it
        asked for: the trials wait for them to end), measure it in the background."""
        job, self._calibrate_next = self._calibrate_next, None
        if job is not None:
            self._calibration.start(job)

    def on_unloaded(self) -> None:
        self._calibration.cancel(quiet=True)
        self.loaded, self.server = None, None
        self._events.model_unloaded()

    def on_status(self, message: str) -> None:
        """The engine's own status line."""
        if self._lookup is None:  # (a load asking for the cached choice says "Calibrating…")
            self._events.status(Message.text(message), 0)

    # ----- calibration: looked up before a load, or measured apart after it -----

    def on_calibration_progress(self, done: int, total: int) -> None:
        if self._lookup is not None:  # only the cache was asked: nothing is measured
            return
        self._waits.set("calibrate", True, Message(Notice.CALIBRATING, (done, total)))
        self._events.calibration_progress(done, total)

    def on_calibrated(self, calibration: calibrate.Calibration, measured_now: bool) -> None:
        self._lookup = None
        self._waits.set("calibrate", False, None)
        self._events.calibrated(calibration, measured_now)

    def on_calibration_stopped(self, message: str) -> None:
        if self._lookup is not None:  # none cached: the model loads as chosen, then it is
            self._calibrate_next, self._lookup = self._lookup, None  # measured apart
            return
        self._waits.set("calibrate", False, None)
        self._events.calibration_stopped(message)
        self._events.status(Message.text(message), 0)

    def cancel_calibration(self) -> None:
        """The tuned-settings box's Cancel: the calibration in the background, else the one
        before a load."""
        if self._calibration.running:
            self._calibration.cancel()
        else:
            self._engine.cancel()

    def on_background_progress(self, done: int, total: int) -> None:
        self._events.background_calibration(done, total)

    def on_background_finished(self, job: CalibrationJob, found: calibrate.Calibration) -> None:
        if job is self._calibration.job:
            self._events.calibration_offered(job.model, found)
            self._events.status(Message(Notice.TUNED_READY), 0)

    def on_background_stopped(self, job: CalibrationJob, message: str) -> None:
        if job is self._calibration.job:
            self._events.background_calibration_stopped(message)
