"""One engine at a time — a model in the local llama.cpp child, or an inference server — and the
jobs run on it.

The window (from its engine thread) and the command line open, load, connect, run, resume and
recover through this one object, so neither face drives llama.cpp's host itself: loading a model
lets a server go and the other way round, a server never keeps KV states and is never audited,
and after llama.cpp dies a new child loads the same model again. Calls are serial: the owner
calls from one thread; only :meth:`cancel` may come from another.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from app.core.calibrate import Calibration, cached, calibrate, candidates, machine_key
from app.core.default_model import sha256_of
from app.core.engine.api import Engine
from app.core.engine.gguf import ModelInfo
from app.core.engine.host import EngineHost
from app.core.engine.remote import NO_AUDIT, NO_KV_STATE, RemoteEngine, ServerInfo
from app.core.engine.remote_http import DEFAULT_RETRIES, DEFAULT_TIMEOUT_S, Connection
from app.core.engine.types import (
    EngineCapabilities,
    EngineCrashedError,
    EngineError,
    KVState,
    LoadedModel,
    LoadSettings,
)
from app.core.jobs.audit import Audit
from app.core.jobs.streaming import ResidentState
from app.core.jobs.tasks import (
    CancelToken,
    JobFinished,
    JobResult,
    resume,
    run_strategies,
    state_after,
)
from app.core.planning.strategies import Planner
from app.core.tokens import LlamaCounter, TokenCounter, host_counter
from app.services.errors import BadRequest
from app.services.jobs import EngineFacts, JobOutcome, JobRun, JobSpec, ResumeSpec


@dataclass(frozen=True)
class ServerSpec:
    """A server to run jobs on (the key stays in memory, never in settings or the history)."""

    url: str
    api_key: str | None = field(default=None, repr=False)
    n_ctx: int | None = None  # None: the server's own
    model: str | None = None  # the server's model id; None: the first it lists
    model_path: str | None = None  # the same model's GGUF here, for exact counts and template
    timeout_s: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES


def connect_remote(spec: ServerSpec, cancelled: Callable[[], bool] | None = None
                   ) -> RemoteEngine:  # fmt: skip
    """A RemoteEngine connected to the server ``spec`` names (closed again if it cannot be):
    what a session runs jobs on, or what ``generate`` and ``remote info`` talk to directly.
    ``cancelled()`` stops the connecting (ServerError)."""
    connection = Connection(spec.url, api_key=spec.api_key, timeout_s=spec.timeout_s,
                            retries=spec.retries)  # fmt: skip
    model_path = Path(spec.model_path).expanduser() if spec.model_path else None
    remote = RemoteEngine(connection, model=spec.model, n_ctx=spec.n_ctx, model_path=model_path)
    try:
        remote.connect(cancelled)
    except BaseException:
        remote.close()
        raise
    return remote


class JobEngine:
    """The engine jobs run on now, and what is known about it."""

    def __init__(self) -> None:
        self._host = EngineHost()
        self._remote: RemoteEngine | None = None
        self._model: tuple[Path, LoadSettings] | None = None  # loaded here: reloaded after a crash
        self._counter: TokenCounter | None = None
        self._loaded: LoadedModel | None = None
        self._server_gguf: Path | None = None  # the server's model as a GGUF here, when given
        self._sha: dict[Path, str] = {}
        self._cancel = CancelToken()
        # what the last job left resident in the cache (JobResult.resident), for a follow-up
        self._resident: ResidentState | None = None

    def __enter__(self) -> JobEngine:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self.close()

    # ----- what is loaded -----

    @property
    def engine(self) -> Engine:
        """What the core jobs drive: the engine host, or the server's RemoteEngine."""
        return self._remote if self._remote is not None else self._host

    @property
    def counter(self) -> TokenCounter | None:
        """The loaded model's exact token counter (None: nothing loaded)."""
        return self._counter

    @property
    def loaded(self) -> LoadedModel | None:
        return self._loaded

    @property
    def settings(self) -> LoadSettings | None:
        """What the local model was loaded with (None: no model here, or a server)."""
        return self._model[1] if self._model is not None else None

    @property
    def server(self) -> ServerInfo | None:
        """The server jobs run on, or None: the local engine."""
        return self._remote.info if self._remote is not None else None

    @property
    def model_info(self) -> ModelInfo | None:
        return self._host.model_info if self._remote is None else None

    @property
    def capabilities(self) -> EngineCapabilities | None:
        return self._host.capabilities if self._remote is None else None

    @property
    def engine_pid(self) -> int | None:
        return None if self._remote is not None else self._host.pid

    @property
    def n_ctx(self) -> int:
        return self._loaded.n_ctx if self._loaded is not None else 0

    @property
    def counter_note(self) -> str:
        """Why counts come from llama.cpp itself (exact but slower), or "" when they do not."""
        counter = self._counter
        return counter.note if isinstance(counter, LlamaCounter) else ""

    def model_sha256(self, path: Path | None = None) -> str:
        """The sha256 of ``path`` (default: the model loaded here, or the GGUF a server's model
        was given as), read once per file (any thread: the window reads it in the background
        right after a load, so a job never waits for it); "" when there is no such file."""
        if path is None:
            if self._model is not None:
                path = self._model[0]
            elif self._remote is not None and self._server_gguf is not None:
                path = self._server_gguf
            else:
                return ""
        if path not in self._sha:
            self._sha[path] = sha256_of(path)
        return self._sha[path]

    def facts(self) -> EngineFacts:
        """The engine as the history records it, for the model loaded or the server."""
        server = self.server
        if server is not None:
            return EngineFacts(f"{server.url} {server.model}", self.model_sha256(), server.url,
                               None)  # fmt: skip
        if self._model is None or self._loaded is None:
            raise BadRequest("no model is loaded")
        path = self._model[0]
        return EngineFacts(str(path), self.model_sha256(path), "local",
                           self._loaded.kv_cache_type)  # fmt: skip

    # ----- loading and connecting -----

    def load(self, path: Path, settings: LoadSettings, *, model_sha256: str = "") -> LoadedModel:
        """Load ``path`` in the local engine (a server is let go first); ``model_sha256`` when
        the caller has read it already. If llama.cpp dies loading it, the engine is replaced by
        a fresh one holding no model (loading the same file again would likely crash again) and
        the EngineCrashedError goes on."""
        self._disconnect()
        path = Path(path)
        if model_sha256:
            self._sha[path] = model_sha256
        try:
            loaded = self._host.load(path, settings)
            counter = host_counter(path, self._host)
        except EngineCrashedError:
            self.unload()
            raise
        self._model, self._counter, self._loaded = (path, settings), counter, loaded
        return loaded

    def calibrated(self, path: Path, settings: LoadSettings, model_sha256: str, *,
                   fresh: bool = False, trials: tuple[LoadSettings, ...] | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   cancelled: Callable[[], bool] = lambda: False,
                   ) -> tuple[Calibration, bool]:  # fmt: skip
        """The fastest settings for this model on this machine: cached ones (measured False),
        or measured now (True) when there are none or ``fresh``. Raises Cancelled."""
        if not fresh:
            machine = machine_key(self._host.start())
            found = cached(model_sha256, machine, settings.kv_cache_type)
            if found is not None:
                return found, False
        todo = list(trials) if trials is not None else candidates(settings)
        if progress is not None:
            progress(0, len(todo))
        found = calibrate(self._host, Path(path), model_sha256, settings, trials=todo,
                          progress=progress, cancelled=cancelled, use_cache=False)  # fmt: skip
        return found, True

    def connect(self, spec: ServerSpec) -> LoadedModel:
        """Run jobs on the server ``spec`` names; the local engine's model is let go once the
        server answers (one engine at a time). What is known of its context, as a LoadedModel."""
        t0 = time.perf_counter()
        token = self._cancel = CancelToken()  # cancel() stops the connecting too
        remote = connect_remote(spec, token.is_set)
        try:
            info, counter = remote.info, remote.counter()
        except BaseException:
            remote.close()
            raise
        self._replace_host()
        self._disconnect()
        self._remote, self._counter, self._model = remote, counter, None
        self._server_gguf = Path(spec.model_path).expanduser() if spec.model_path else None
        self._loaded = LoadedModel(f"{info.url} {info.model}", info.n_ctx, info.n_ctx_train or 0,
                                   0, 0, 0, 0, False, "", False, time.perf_counter() - t0,
                                   info.warnings)  # fmt: skip
        return self._loaded

    def unload(self) -> None:
        """No model and no server: a fresh engine child waits."""
        self._replace_host()
        self._disconnect()
        self._model = self._counter = self._loaded = None

    def count(self, text: str) -> int:
        if self._counter is None:
            raise BadRequest("load a model or connect to a server first")
        return self._counter.count(text)

    # ----- jobs -----

    def cancel(self) -> None:
        """Stop the running job at once (any thread): the job at its next step, the engine now."""
        self._cancel.set()
        remote = self._remote
        if remote is not None:
            remote.cancel()
        else:
            self._host.cancel()

    def run(self, text: str, spec: JobSpec, *, planner: Planner | None = None,
            cancel: CancelToken | None = None) -> JobRun:  # fmt: skip
        """``spec`` on ``text``. ``planner`` (for this text and counter) holds the plans the face
        showed, so the job runs what was shown; others are ignored. ``cancel``: a token shared
        by jobs run side by side on a server (a batch), which :meth:`cancel` then stops together.
        A server keeps no KV state (``keep_kv`` is dropped) and cannot be audited (BadRequest)."""
        spec.check()
        counter, remote = self._counter, self._remote
        if counter is None or self._loaded is None:
            raise BadRequest("load a model or connect to a server first")
        if remote is not None and spec.audit:
            raise BadRequest(f"the audit needs the local engine: {NO_AUDIT}")
        if remote is not None and spec.keep_kv:
            spec = replace(spec, keep_kv=False)
        self._cancel = cancel = cancel if cancel is not None else CancelToken()
        options = spec.options(self._loaded.n_ctx, cancel)
        outcome = JobOutcome(spec, engine=self.facts())
        if spec.audit:  # the counter is the model's own tokenizer: the counts must match too
            outcome.audit = options["audit"] = Audit(self._host, exact_counts=True)
        if planner is not None and planner.counter is not counter:
            planner = None
        if planner is None:
            planner = Planner(text, counter)
        if spec.task == "ask" and remote is None:  # a follow-up keeps what its plans share
            options["resident_after"] = self._resident
        self._resident = None  # any job changes what the cache holds
        events = run_strategies(self.engine, text, counter, task=spec.task,
                                strategies=list(spec.strategies), planner=planner,
                                **options)  # fmt: skip
        return JobRun(self._keeping_resident(events), outcome,
                      lambda result: self._state_after(result, outcome))  # fmt: skip

    def _keeping_resident(self, events: Iterator[Any]) -> Iterator[Any]:
        """The job's events; what its last job left resident in the cache is kept for the
        next ask (the core job takes it up only where the cache still holds it)."""
        for ev in events:
            if isinstance(ev, JobFinished):
                self._resident = ev.result.resident
            yield ev

    def resume(self, spec: ResumeSpec) -> JobRun:
        """Generate a version's reply again from its saved KV state, without evaluating its
        prompt (the local engine only)."""
        if self._remote is not None:
            raise BadRequest(f"a rollback cannot resume instantly on a server: {NO_KV_STATE}")
        self._cancel = cancel = CancelToken()
        job = JobSpec(spec.task, (spec.strategy,), max_tokens=spec.max_tokens,
                      sampling=spec.sampling)  # fmt: skip
        events = resume(self._host, spec.state, spec.prompt_tokens, task=spec.task,
                        strategy=spec.strategy, max_tokens=spec.max_tokens, sources=spec.sources,
                        cancel=cancel, sampling=spec.sampling)  # fmt: skip
        return JobRun(events, JobOutcome(job, engine=self.facts()), lambda _result: None)

    def died(self, outcome: JobOutcome) -> str:
        """After a job: why the local engine is gone ("" while it lives, or with no model)."""
        if self._model is None or self._host.alive:
            return ""
        errors = [r.error for r in outcome.results if r.error]
        return (errors or [outcome.lost_state or "the engine process ended"])[-1]

    def restart(self) -> LoadedModel | None:
        """llama.cpp died: a new engine child, with the same model loaded again (None: there
        was none)."""
        self._replace_host()
        if self._model is None:
            return None
        path, settings = self._model
        return self.load(path, settings)

    def close(self) -> None:
        self._host.close()
        self._disconnect()

    # ----- plumbing -----

    def _state_after(self, result: JobResult, outcome: JobOutcome) -> KVState | None:
        try:
            return state_after(self._host, result)
        except EngineError as exc:  # the run stands; only its state is lost
            outcome.lost_state = str(exc)
            return None

    def _replace_host(self) -> None:
        self._host.close()
        self._host = EngineHost()
        if self._remote is None:
            self._loaded = None

    def _disconnect(self) -> None:
        remote, self._remote = self._remote, None
        if remote is not None:
            remote.close()
            self._loaded = self._counter = None
